//! The targets the report checks, as one table of data ([`TARGETS`]), and their reading off
//! the measured rows.
//!
//! A target names the kernels it concerns, the rows it reads (a filter), the figure it takes
//! from each row, and the goal that figure must meet on every row it reads: "softmax: time per
//! element ÷ bare exp, in cache, target ≤ 1.5×". Entries without a goal are figures worth
//! reading beside the targets (printed apart, without ✓ or ✗). A kernel added to the report
//! adds its targets here; nothing else prints them.
//!
//! Targets are read per kernel and SIMD ISA (the scalar path and plain Rust are baselines, not
//! targets). A target whose rows the run did not measure (`--full` shapes in a default run) is
//! listed as not measured.

use super::attention;
use super::gau;
use super::linear;
use super::output::{JsonObject, Row};

/// What a target asks of its figure on every row it reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// At least this.
    AtLeast(f64),
    /// At most this.
    AtMost(f64),
    /// No goal: a figure to read beside the targets.
    None,
}

impl Goal {
    /// Whether `v` meets the goal (`None` without a goal).
    pub fn met(self, v: f64) -> Option<bool> {
        match self {
            Goal::AtLeast(g) => Some(v >= g),
            Goal::AtMost(g) => Some(v <= g),
            Goal::None => None,
        }
    }

    /// The worst of `values` against the goal (the first for [`Goal::None`]).
    fn worst(self, values: impl Iterator<Item = f64>) -> Option<f64> {
        let mut values = values.peekable();
        values.peek()?;
        Some(match self {
            Goal::AtLeast(_) => values.fold(f64::INFINITY, f64::min),
            Goal::AtMost(_) => values.fold(f64::NEG_INFINITY, f64::max),
            Goal::None => values.next()?,
        })
    }
}

/// How a target's figure is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A ratio of times or speeds: `1.31×`.
    Times,
    /// A fraction of a limit: `0.83`.
    Fraction,
    /// GFLOP/s: `95.3`.
    Gflops,
}

impl Unit {
    /// `v` in this unit.
    pub fn format(self, v: f64) -> String {
        match self {
            Unit::Times => format!("{v:.2}×"),
            Unit::Fraction => format!("{v:.2}"),
            Unit::Gflops => format!("{v:.1}"),
        }
    }
}

/// The ISAs a target applies to (among the SIMD ISAs of the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isas {
    /// Every one.
    All,
    /// This one only.
    Only(&'static str),
    /// Every one but this.
    Except(&'static str),
}

impl Isas {
    fn includes(self, isa: &str) -> bool {
        match self {
            Isas::All => true,
            Isas::Only(i) => i == isa,
            Isas::Except(i) => i != isa,
        }
    }
}

/// One target (or, without a goal, one figure) of the report.
pub struct Target {
    /// The kernels (the rows' `kernel`) it is read for, each on its own line.
    pub kernels: &'static [&'static str],
    /// The ISAs it applies to.
    pub isas: Isas,
    /// What it measures, as printed: "time per element ÷ the bare exp of the same ISA".
    pub measures: &'static str,
    /// A short name for the summary's ✓/✗ list: "÷exp".
    pub label: &'static str,
    /// Which of the kernel's rows on the ISA it reads.
    pub rows: fn(&Row) -> bool,
    /// The figure of a row (all rows of the run at hand, for figures against another row).
    pub value: fn(&Row, &[Row]) -> Option<f64>,
    /// What the figure must meet on every row read.
    pub goal: Goal,
    /// How the figure is printed.
    pub unit: Unit,
}

impl Target {
    /// The goal as printed: `≥ 0.85`, `≤ 1.50×`.
    pub fn goal_text(&self) -> Option<String> {
        match self.goal {
            Goal::AtLeast(g) => Some(format!("≥ {}", self.unit.format(g))),
            Goal::AtMost(g) => Some(format!("≤ {}", self.unit.format(g))),
            Goal::None => None,
        }
    }
}

// Row filters and figures shared by the table.

fn f32_rows(r: &Row) -> bool {
    r.dtype == "f32"
}

fn held_against(r: &Row, prefix: &str) -> bool {
    r.roofline.as_deref().is_some_and(|n| n.starts_with(prefix))
}

/// A working set beyond 4 MiB: the report's beyond-L2 shapes (32 MiB for f32, 16 MiB for
/// the half types) and not its in-cache ones (128 KiB).
fn beyond_l2(r: &Row) -> bool {
    r.bytes.is_some_and(|b| b > (4 << 20) as f64)
}

fn f32_in_cache_vs_exp(r: &Row) -> bool {
    f32_rows(r) && held_against(r, "exp(")
}

fn f32_beyond_l2_vs_copy(r: &Row) -> bool {
    f32_rows(r) && held_against(r, "copy(") && beyond_l2(r)
}

fn half_beyond_l2(r: &Row) -> bool {
    !f32_rows(r) && held_against(r, "copy(") && beyond_l2(r)
}

fn half_rows(r: &Row) -> bool {
    !f32_rows(r)
}

fn roof(r: &Row, _: &[Row]) -> Option<f64> {
    r.roofline_ratio
}

fn per_roof(r: &Row, _: &[Row]) -> Option<f64> {
    Some(1.0 / r.roofline_ratio?)
}

fn vs_plain(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs_plain
}

fn vs_avx2(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs_isa.iter().find(|(isa, _)| isa == "avx2").map(|&(_, q)| q)
}

/// A half-typed row's elements per second ÷ those of the f32 row of the same kernel, ISA and
/// shape (separate cases of the same run: a ratio of medians).
fn half_vs_f32_row(r: &Row, all: &[Row]) -> Option<f64> {
    let f = all
        .iter()
        .find(|o| o.kernel == r.kernel && o.isa == r.isa && o.dtype == "f32" && o.shape == r.shape)?;
    Some(f.ns_per_iter / r.ns_per_iter)
}

fn vs_f32(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("f32")
}

fn vs_add_ln(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("add+ln")
}

fn vs_gemm(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("gemm")
}

fn vs_gemm_plain(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("gemm+plain")
}

fn vs_matrixmultiply(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("matrixmultiply")
}

fn vs_dense(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("attention plain")
}

fn time_vs_dense(r: &Row, _: &[Row]) -> Option<f64> {
    Some(1.0 / r.vs("attention plain")?)
}

fn gflops_dense(r: &Row, _: &[Row]) -> Option<f64> {
    r.gflop_per_s_dense()
}

fn gflops(r: &Row, _: &[Row]) -> Option<f64> {
    r.gflop_per_s()
}

fn vs_paper(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("paper")
}

fn vs_unpacked(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs_isa.iter().find(|(n, _)| n == "unpacked").map(|&(_, q)| q)
}

fn attention_variant(r: &Row, variant: &str) -> bool {
    f32_rows(r) && attention::parse_shape(&r.shape).is_some_and(|(v, _)| v == variant)
}

fn attention_plain(r: &Row) -> bool {
    attention_variant(r, "plain")
}

fn attention_realformer(r: &Row) -> bool {
    attention_variant(r, "realformer")
}

fn attention_realformer_long(r: &Row) -> bool {
    attention_realformer(r) && attention::parse_shape(&r.shape).is_some_and(|(_, len)| len == 2048)
}

fn attention_causal(r: &Row) -> bool {
    attention_variant(r, "causal")
}

fn attention_padded(r: &Row) -> bool {
    attention_variant(r, "padded")
}

fn gau_dense(r: &Row) -> bool {
    f32_rows(r) && gau::parse_shape(&r.shape).is_some_and(|(_, causal)| !causal)
}

fn gau_dense_long(r: &Row) -> bool {
    gau_dense(r) && gau::parse_shape(&r.shape).is_some_and(|(len, _)| len == 1024)
}

fn gau_causal(r: &Row) -> bool {
    f32_rows(r) && gau::parse_shape(&r.shape).is_some_and(|(_, causal)| causal)
}

fn encoder_one_by_128(r: &Row) -> bool {
    r.shape == "1x128"
}

/// A linear row's `(M, GELU, bf16 weights)`.
/// `(M, gelu, bf16 weights)` of a linear row whose weights stay in cache.
fn linear_shape(r: &Row) -> Option<(usize, bool, bool)> {
    let s = linear::parse_shape(&r.shape).filter(|s| !s.streamed)?;
    Some((s.m, s.layer.2, s.bf16))
}

/// bf16 weights, of a linear row whose weights stream from memory.
fn linear_streamed(r: &Row) -> Option<bool> {
    let s = linear::parse_shape(&r.shape).filter(|s| s.streamed)?;
    Some(s.bf16)
}

fn linear_large(r: &Row) -> bool {
    f32_rows(r) && linear_shape(r).is_some_and(|(m, _, _)| m >= 128)
}

fn linear_large_gelu(r: &Row) -> bool {
    f32_rows(r) && linear_shape(r).is_some_and(|(m, gelu, bf16)| m >= 128 && gelu && !bf16)
}

fn linear_large_identity(r: &Row) -> bool {
    f32_rows(r) && linear_shape(r).is_some_and(|(m, gelu, bf16)| m >= 128 && !gelu && !bf16)
}

fn linear_small_f32_weights(r: &Row) -> bool {
    f32_rows(r) && linear_shape(r).is_some_and(|(m, _, bf16)| m == 16 && !bf16)
}

fn linear_small_bf16_weights(r: &Row) -> bool {
    f32_rows(r) && linear_shape(r).is_some_and(|(m, _, bf16)| m == 16 && bf16)
}

fn linear_streamed_rows(r: &Row) -> bool {
    f32_rows(r) && linear_streamed(r).is_some()
}

fn linear_streamed_f32_weights(r: &Row) -> bool {
    f32_rows(r) && linear_streamed(r) == Some(false)
}

fn linear_streamed_bf16_weights(r: &Row) -> bool {
    f32_rows(r) && linear_streamed(r) == Some(true)
}

fn vs_copy(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("copy")
}

fn linear_small(r: &Row) -> bool {
    linear_small_f32_weights(r) || linear_small_bf16_weights(r)
}

/// The larger of the copy and FMA-peak fractions: the time of the binding bound ÷ the row's.
fn weights_roofline(r: &Row, rows: &[Row]) -> Option<f64> {
    Some(vs_copy(r, rows)?.max(roof(r, rows)?))
}

fn vs_f32_weights(r: &Row, _: &[Row]) -> Option<f64> {
    r.vs("f32 weights")
}

fn norm_in_cache(r: &Row) -> bool {
    f32_rows(r) && !beyond_l2(r) && r.input.is_none()
}

fn any_f32(r: &Row) -> bool {
    f32_rows(r) && r.input.is_none()
}

/// The memory-bound kernels with f16 and bf16 rows.
const HALF_MEMORY_BOUND: &[&str] = &[
    "softmax",
    "log_softmax",
    "exp",
    "sigmoid",
    "swish",
    "gelu",
    "gelu_tanh",
    "layer_norm",
    "add_ln_h",
    "rms_norm",
    "batch_norm",
];

/// Every target and figure of the report.
pub const TARGETS: &[Target] = &[
    // Softmax: in cache it should cost little more than the exps it computes; beyond L2 run at
    // the memory's speed.
    Target {
        kernels: &["softmax", "log_softmax"],
        isas: Isas::All,
        measures: "time per element ÷ the bare exp of the same ISA, in cache",
        label: "÷exp",
        rows: f32_in_cache_vs_exp,
        value: per_roof,
        goal: Goal::AtMost(1.5),
        unit: Unit::Times,
    },
    Target {
        kernels: &["softmax", "log_softmax"],
        isas: Isas::All,
        measures: "fraction of the same-run copy beyond L2",
        label: "copy",
        rows: f32_beyond_l2_vs_copy,
        value: roof,
        goal: Goal::AtLeast(0.85),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["softmax", "log_softmax"],
        isas: Isas::All,
        measures: "speed-up over plain Rust",
        label: "xplain",
        rows: any_f32,
        value: vs_plain,
        goal: Goal::AtLeast(8.0),
        unit: Unit::Times,
    },
    Target {
        kernels: &["softmax", "log_softmax"],
        isas: Isas::Only("avx512"),
        measures: "speed ÷ the same kernel's on avx2, in cache",
        label: "÷avx2",
        rows: f32_in_cache_vs_exp,
        value: vs_avx2,
        goal: Goal::AtLeast(1.6),
        unit: Unit::Times,
    },
    // GELU: in cache about an exp's cost; beyond L2 at the memory's speed.
    Target {
        kernels: &["gelu", "gelu_tanh"],
        isas: Isas::All,
        measures: "time per element ÷ the bare exp of the same ISA, in cache",
        label: "÷exp",
        rows: f32_in_cache_vs_exp,
        value: per_roof,
        goal: Goal::AtMost(1.5),
        unit: Unit::Times,
    },
    Target {
        kernels: &["gelu", "gelu_tanh"],
        isas: Isas::All,
        measures: "fraction of the same-run copy beyond L2",
        label: "copy",
        rows: f32_beyond_l2_vs_copy,
        value: roof,
        goal: Goal::AtLeast(0.85),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["gelu"],
        isas: Isas::All,
        measures: "speed-up over plain Rust (libm's erff in ½x·(1 + erf(x/√2)))",
        label: "xplain",
        rows: any_f32,
        value: vs_plain,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["gelu_tanh"],
        isas: Isas::All,
        measures: "speed-up over plain Rust (f32::tanh in the tanh formula)",
        label: "xplain",
        rows: any_f32,
        value: vs_plain,
        goal: Goal::None,
        unit: Unit::Times,
    },
    // The LayerNorm family.
    Target {
        kernels: &["layer_norm"],
        isas: Isas::All,
        measures: "fraction of the same-run copy beyond L2",
        label: "copy",
        rows: f32_beyond_l2_vs_copy,
        value: roof,
        goal: Goal::AtLeast(0.85),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["add_ln_h"],
        isas: Isas::All,
        measures: "fraction of the same-run copy beyond L2",
        label: "copy",
        rows: f32_beyond_l2_vs_copy,
        value: roof,
        goal: Goal::AtLeast(0.80),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["add_ln", "rms_norm"],
        isas: Isas::All,
        measures: "fraction of the same-run copy beyond L2",
        label: "copy",
        rows: f32_beyond_l2_vs_copy,
        value: roof,
        goal: Goal::None,
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["layer_norm"],
        isas: Isas::All,
        measures: "speed-up over a plain Rust two-pass, in cache",
        label: "xplain",
        rows: norm_in_cache,
        value: vs_plain,
        goal: Goal::AtLeast(10.0),
        unit: Unit::Times,
    },
    Target {
        kernels: &["add_ln_h"],
        isas: Isas::All,
        measures: "speed-up over a plain add loop then a plain two-pass, in cache",
        label: "xplain",
        rows: norm_in_cache,
        value: vs_plain,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["add_ln_h"],
        isas: Isas::All,
        measures: "speed ÷ the unfused add loop then this crate's layer_norm (add+ln)",
        label: "÷add+ln",
        rows: any_f32,
        value: vs_add_ln,
        goal: Goal::AtLeast(1.3),
        unit: Unit::Times,
    },
    // Half-typed tensors of the memory-bound kernels move half the bytes.
    Target {
        kernels: HALF_MEMORY_BOUND,
        isas: Isas::All,
        measures: "f16/bf16 elements per second ÷ the f32 row's, beyond L2",
        label: "half÷f32",
        rows: half_beyond_l2,
        value: half_vs_f32_row,
        goal: Goal::AtLeast(1.6),
        unit: Unit::Times,
    },
    Target {
        kernels: HALF_MEMORY_BOUND,
        isas: Isas::All,
        measures: "f16/bf16 fraction of the same-run copy of their bytes, beyond L2",
        label: "half copy",
        rows: half_beyond_l2,
        value: roof,
        goal: Goal::AtLeast(0.8),
        unit: Unit::Fraction,
    },
    // Attention.
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "fraction of the same-run FMA peak, plain, L ≥ 512",
        label: "fma",
        rows: attention_plain,
        value: roof,
        goal: Goal::AtLeast(0.75),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "fraction of the same-run FMA peak, RealFormer (P in, S out), L ≥ 512",
        label: "fma realformer",
        rows: attention_realformer,
        value: roof,
        goal: Goal::AtLeast(0.75),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "speed-up over the gemm crate around a plain scalar softmax, plain",
        label: "xgemm+plain",
        rows: attention_plain,
        value: vs_gemm_plain,
        goal: Goal::AtLeast(1.5),
        unit: Unit::Times,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "realformer (P in, S out) speed ÷ plain speed, L=2048 (--full)",
        label: "realformer",
        rows: attention_realformer_long,
        value: vs_dense,
        goal: Goal::AtLeast(0.70),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "causal time ÷ non-causal time",
        label: "causal",
        rows: attention_causal,
        value: time_vs_dense,
        goal: Goal::AtMost(0.55),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "speed-up over the gemm crate around this crate's softmax, plain",
        label: "xgemm",
        rows: attention_plain,
        value: vs_gemm,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "speed-up over matrixmultiply around this crate's softmax, plain",
        label: "xmm",
        rows: attention_plain,
        value: vs_matrixmultiply,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "realformer speed-up over the gemm-crate composition (P added by the GEMM, S written)",
        label: "realformer xgemm",
        rows: attention_realformer,
        value: vs_gemm,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "causal GFLOP/s counted as if dense (PyTorch's convention)",
        label: "causal dense",
        rows: attention_causal,
        value: gflops_dense,
        goal: Goal::None,
        unit: Unit::Gflops,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "padded (3/4 of the keys valid) time ÷ plain time (ideal 0.75)",
        label: "padded",
        rows: attention_padded,
        value: time_vs_dense,
        goal: Goal::None,
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures:
            "strided views (Q, K, V in one fused QKV buffer, O in [B, L, H·D]): time ÷ contiguous at the same shape",
        label: "strided",
        rows: attention::strided_row,
        value: attention::time_vs_contiguous,
        goal: Goal::AtMost(1.05),
        unit: Unit::Times,
    },
    Target {
        kernels: &["attention"],
        isas: Isas::All,
        measures: "fraction of the same-run FMA peak on strided views, H=12, heads of 32 beside heads of 64",
        label: "strided fma",
        rows: attention::strided_row,
        value: roof,
        goal: Goal::None,
        unit: Unit::Fraction,
    },
    // The gated attention unit.
    Target {
        kernels: &["gau"],
        isas: Isas::Only("avx512"),
        measures: "fraction of the same-run FMA peak, dense, T=1024 (--full)",
        label: "fma",
        rows: gau_dense_long,
        value: roof,
        goal: Goal::AtLeast(0.80),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["gau"],
        isas: Isas::Except("avx512"),
        measures: "fraction of the same-run FMA peak, dense, T=1024 (--full)",
        label: "fma",
        rows: gau_dense_long,
        value: roof,
        goal: Goal::AtLeast(0.75),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["gau"],
        isas: Isas::All,
        measures: "speed-up over the unfused gemm-crate composition, dense",
        label: "xgemm",
        rows: gau_dense,
        value: vs_gemm,
        goal: Goal::AtLeast(1.2),
        unit: Unit::Times,
    },
    Target {
        kernels: &["gau"],
        isas: Isas::All,
        measures: "GFLOP/s, dense",
        label: "GFLOP/s",
        rows: gau_dense,
        value: gflops,
        goal: Goal::None,
        unit: Unit::Gflops,
    },
    Target {
        kernels: &["gau"],
        isas: Isas::All,
        measures: "causal: speed-up over the composition",
        label: "causal xgemm",
        rows: gau_causal,
        value: vs_gemm,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["gau"],
        isas: Isas::All,
        measures: "causal: GFLOP/s counted as if dense",
        label: "causal dense",
        rows: gau_causal,
        value: gflops_dense,
        goal: Goal::None,
        unit: Unit::Gflops,
    },
    Target {
        kernels: &["gau_packed"],
        isas: Isas::All,
        measures: "weights packed once: fraction of the FMA peak, dense",
        label: "fma",
        rows: gau_dense,
        value: roof,
        goal: Goal::None,
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["gau_packed"],
        isas: Isas::All,
        measures: "weights packed once: speed-up over packing them per call, dense",
        label: "xunpacked",
        rows: gau_dense,
        value: vs_unpacked,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["gau_options"],
        isas: Isas::All,
        measures: "Laplace, softmax, softmax-plus, partial RoPE with a prefix-LM mask: speed ÷ the paper's options",
        label: "xpaper",
        rows: f32_rows,
        value: vs_paper,
        goal: Goal::AtLeast(0.9),
        unit: Unit::Times,
    },
    // Linear: compute-bound from M = 128 on; at M = 16 it streams its weights.
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "fraction of the same-run FMA peak, M ≥ 128 (f32 and bf16 weights)",
        label: "fma",
        rows: linear_large,
        value: roof,
        goal: Goal::AtLeast(0.85),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "speed-up over the gemm crate then a separate bias loop and GELU pass (this crate's gelu, \
                   same ISA), GELU layers, M ≥ 128",
        label: "xgemm",
        rows: linear_large_gelu,
        value: vs_gemm,
        goal: Goal::AtLeast(1.1),
        unit: Unit::Times,
    },
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "weight bytes per second ÷ the same-run copy bandwidth of that many bytes, M = 16, f32 weights",
        label: "w copy",
        rows: linear_small_f32_weights,
        value: vs_copy,
        goal: Goal::AtLeast(0.7),
        unit: Unit::Fraction,
    },
    // At M = 16 a layer does 32 FLOPs per weight, 8 per byte of f32: where the FMA peak is
    // below 8× the copy bandwidth (every machine measured so far), the FMAs bound the call
    // before the weights do, and the copy fraction above cannot reach 1. This is the fraction
    // of the bound that applies: the slower of the copy and the FMAs at peak.
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "fraction of the same-run roofline, M = 16: the slower of the weights' copy and the FMAs at peak ÷ the kernel's time",
        label: "w roof",
        rows: linear_small,
        value: weights_roofline,
        goal: Goal::None,
        unit: Unit::Fraction,
    },
    // The same at M = 16 with every call's weights read from memory (a model larger than the
    // LLC), against a copy of as many bytes from memory.
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "weight bytes per second ÷ the same-run copy bandwidth of that many bytes from memory, M = 16, \
                   f32 weights streamed from beyond the LLC",
        label: "w mem",
        rows: linear_streamed_f32_weights,
        value: vs_copy,
        goal: Goal::AtLeast(0.7),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "fraction of the same-run roofline, M = 16, weights streamed: the slower of the weights' copy \
                   from memory and the FMAs at peak ÷ the kernel's time",
        label: "mem roof",
        rows: linear_streamed_rows,
        value: weights_roofline,
        goal: Goal::None,
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "bf16-weight speed-up over f32 weights, M = 16, weights streamed",
        label: "bf16w mem",
        rows: linear_streamed_bf16_weights,
        value: vs_f32_weights,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "bf16-weight speed-up over f32 weights, M = 16",
        label: "bf16w÷f32w",
        rows: linear_small_bf16_weights,
        value: vs_f32_weights,
        goal: Goal::None,
        unit: Unit::Times,
    },
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "weight bytes per second ÷ the same-run copy bandwidth of that many bytes, M = 16, bf16 weights",
        label: "bf16w copy",
        rows: linear_small_bf16_weights,
        value: vs_copy,
        goal: Goal::None,
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["linear"],
        isas: Isas::All,
        measures: "speed-up over the gemm crate then a separate bias loop, layers without activation, M ≥ 128",
        label: "xgemm id",
        rows: linear_large_identity,
        value: vs_gemm,
        goal: Goal::None,
        unit: Unit::Times,
    },
    // The whole encoder pass: the FMA peak at a batch of one 128-token sentence (every layer
    // compute-bound), and the speed-up over the same model from unfused steps.
    Target {
        kernels: &["encoder"],
        isas: Isas::All,
        measures: "fraction of the same-run FMA peak over the whole pass, 1x128",
        label: "fma",
        rows: encoder_one_by_128,
        value: roof,
        goal: Goal::AtLeast(0.8),
        unit: Unit::Fraction,
    },
    Target {
        kernels: &["encoder"],
        isas: Isas::All,
        measures: "speed-up over the same model from the gemm crate and separate bias, GELU, add and norm passes",
        label: "xunfused",
        rows: f32_rows,
        value: vs_gemm,
        goal: Goal::None,
        unit: Unit::Times,
    },
    // Half-typed tensors of the compute-bound kernels keep the f32 speed.
    Target {
        kernels: &["attention", "gau"],
        isas: Isas::All,
        measures: "f16/bf16 GFLOP/s ÷ the f32 kernel's",
        label: "half÷f32",
        rows: half_rows,
        value: vs_f32,
        goal: Goal::AtLeast(0.9),
        unit: Unit::Fraction,
    },
];

/// A target read on one kernel and ISA.
pub struct Outcome<'t> {
    /// The target.
    pub target: &'t Target,
    /// The kernel.
    pub kernel: &'static str,
    /// The ISA.
    pub isa: String,
    /// Each row read: its shape (and type where not f32), and the figure.
    pub values: Vec<(String, f64)>,
}

impl Outcome<'_> {
    /// Whether every figure meets the goal; `None` without a goal or figures.
    pub fn met(&self) -> Option<bool> {
        if self.values.is_empty() {
            return None;
        }
        self.values
            .iter()
            .map(|&(_, v)| self.target.goal.met(v))
            .try_fold(true, |all, m| Some(all && m?))
    }

    /// The worst figure against the goal.
    pub fn worst(&self) -> Option<f64> {
        self.target.goal.worst(self.values.iter().map(|&(_, v)| v))
    }

    /// Each figure with its shape, ✓ or ✗: `128x128 1.31× ✓, 4x4096 1.76× ✗`, or "not
    /// measured in this run".
    pub fn figures(&self) -> String {
        if self.values.is_empty() {
            return "not measured in this run".to_string();
        }
        self.values
            .iter()
            .map(|(shape, v)| {
                let mark = match self.target.goal.met(*v) {
                    Some(true) => " ✓",
                    Some(false) => " ✗",
                    None => "",
                };
                format!("{shape} {}{mark}", self.target.unit.format(*v))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The outcome as one JSON object.
    pub fn json(&self) -> String {
        let t = self.target;
        let mut o = JsonObject::default();
        o.str("kind", "target");
        o.str("kernel", self.kernel);
        o.str("isa", &self.isa);
        o.str("measures", t.measures);
        let (op, goal) = match t.goal {
            Goal::AtLeast(g) => (Some(">="), Some(g)),
            Goal::AtMost(g) => (Some("<="), Some(g)),
            Goal::None => (None, None),
        };
        o.opt_str("goal_op", op);
        o.num("goal", goal);
        let values: Vec<String> = self
            .values
            .iter()
            .map(|(shape, v)| {
                let mut e = JsonObject::default();
                e.str("shape", shape);
                e.num("value", Some(*v));
                e.opt_bool("met", t.goal.met(*v));
                e.finish()
            })
            .collect();
        o.raw("values", &format!("[{}]", values.join(",")));
        o.opt_bool("met", self.met());
        o.finish()
    }
}

/// The SIMD ISAs among `rows`, widest first.
pub fn simd_isas(rows: &[Row]) -> Vec<String> {
    const ORDER: [&str; 3] = ["avx512", "avx2", "neon"];
    let mut isas: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.is_kernel() && r.isa != "scalar") {
        if !isas.contains(&r.isa) {
            isas.push(r.isa.clone());
        }
    }
    isas.sort_by_key(|i| ORDER.iter().position(|o| o == i).unwrap_or(ORDER.len()));
    isas
}

/// The outcomes of one target on one kernel, every ISA in one line: what, the target, each
/// ISA's figures with ✓ or ✗. `None` where no ISA measured a row of it.
pub fn line(outcomes: &[&Outcome]) -> Option<String> {
    let first = outcomes.first()?;
    let t = first.target;
    let parts: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.values.is_empty())
        .map(|o| format!("{} {}", o.isa, o.figures()))
        .collect();
    if parts.is_empty() {
        return None;
    }
    let goal = t.goal_text().map_or(String::new(), |g| format!(", target {g}"));
    Some(format!("{}: {}{goal}: {}", first.kernel, t.measures, parts.join("; ")))
}

/// `outcomes` (as [`read`] orders them) in groups of one target and kernel, every ISA.
pub fn groups<'o, 't>(outcomes: &'o [Outcome<'t>]) -> Vec<Vec<&'o Outcome<'t>>> {
    let mut out: Vec<Vec<&Outcome>> = Vec::new();
    for o in outcomes {
        match out.last_mut() {
            Some(g) if std::ptr::eq(g[0].target, o.target) && g[0].kernel == o.kernel => g.push(o),
            _ => out.push(vec![o]),
        }
    }
    out
}

/// The targets (with a goal) the run measured no row of, one entry per target: the kernels it
/// concerns and its words.
pub fn unmeasured(outcomes: &[Outcome]) -> Vec<String> {
    let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
    let missing = |g: &&Vec<&Outcome>| g[0].target.goal != Goal::None && g.iter().all(|o| o.values.is_empty());
    for g in groups(outcomes).iter().filter(missing) {
        let (t, kernel) = (g[0].target, g[0].kernel);
        match out.iter_mut().find(|(m, _)| *m == t.measures) {
            Some((_, kernels)) if !kernels.contains(&kernel) => kernels.push(kernel),
            Some(_) => {}
            None => out.push((t.measures, vec![kernel])),
        }
    }
    out.into_iter()
        .map(|(measures, kernels)| format!("{} ({measures})", kernels.join(", ")))
        .collect()
}

/// Every target of `targets` read on `rows`, per kernel and SIMD ISA of the run (kernels the
/// run did not measure at all are left out).
pub fn read<'t>(targets: &'t [Target], rows: &[Row]) -> Vec<Outcome<'t>> {
    let isas = simd_isas(rows);
    let mut out = Vec::new();
    for t in targets {
        for &kernel in t.kernels {
            if !rows.iter().any(|r| r.kernel == kernel) {
                continue;
            }
            for isa in isas.iter().filter(|i| t.isas.includes(i)) {
                let values = rows
                    .iter()
                    .filter(|r| r.kernel == kernel && &r.isa == isa && (t.rows)(r))
                    .filter_map(|r| {
                        let v = (t.value)(r, rows)?;
                        let shape = if r.dtype == "f32" {
                            r.shape.clone()
                        } else {
                            format!("{} {}", r.shape, r.dtype)
                        };
                        Some((shape, v))
                    })
                    .collect();
                out.push(Outcome {
                    target: t,
                    kernel,
                    isa: isa.clone(),
                    values,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kernel: &str, isa: &str, shape: &str, roof_name: &str, ratio: f64) -> Row {
        Row {
            kernel: kernel.into(),
            isa: isa.into(),
            dtype: "f32".into(),
            shape: shape.into(),
            bytes: Some((32 << 20) as f64),
            ns_per_iter: 1000.0,
            roofline: Some(roof_name.into()),
            roofline_ratio: Some(ratio),
            vs_plain: Some(9.0),
            ..Row::default()
        }
    }

    #[test]
    fn targets_are_read_per_kernel_and_isa() {
        let rows = vec![
            row("softmax", "avx512", "4096x1024", "copy(avx512, ordinary stores)", 0.9),
            row("softmax", "avx2", "4096x1024", "copy(avx2, ordinary stores)", 0.7),
            row("softmax", "plain", "4096x1024", "copy(sse2, ordinary stores)", 0.1),
        ];
        let outcomes = read(TARGETS, &rows);
        let copy: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.kernel == "softmax" && o.target.label == "copy")
            .collect();
        assert_eq!(copy.len(), 2, "one per SIMD ISA, none for plain");
        assert_eq!(copy[0].met(), Some(true));
        assert_eq!(copy[1].met(), Some(false));
        assert_eq!(copy[1].worst(), Some(0.7));
        let merged = line(&copy).expect("measured");
        assert_eq!(
            merged,
            "softmax: fraction of the same-run copy beyond L2, target ≥ 0.85: avx512 4096x1024 0.90 ✓; avx2 4096x1024 0.70 ✗"
        );
        assert_eq!(
            groups(&outcomes).iter().filter(|g| g[0].target.label == "copy").count(),
            1
        );
        let exp = outcomes
            .iter()
            .find(|o| o.kernel == "softmax" && o.target.label == "÷exp")
            .expect("listed");
        assert_eq!(exp.met(), None, "no in-cache row: not measured");
        assert_eq!(exp.figures(), "not measured in this run");
        assert_eq!(line(&[exp]), None);
        assert!(
            !outcomes.iter().any(|o| o.kernel == "attention"),
            "kernels not run are left out"
        );
        let j = copy[0].json();
        assert!(
            j.starts_with("{\"kind\":\"target\",\"kernel\":\"softmax\",\"isa\":\"avx512\""),
            "{j}"
        );
        assert!(j.contains("\"goal_op\":\">=\",\"goal\":8.5e-1"), "{j}");
        assert!(
            j.contains("\"values\":[{\"shape\":\"4096x1024\",\"value\":9e-1,\"met\":true}],\"met\":true"),
            "{j}"
        );
    }

    #[test]
    fn every_target_names_what_it_measures() {
        for t in TARGETS {
            assert!(!t.kernels.is_empty() && !t.measures.is_empty() && !t.label.is_empty());
            assert!(!t.measures.to_lowercase().contains("issue"), "{}", t.measures);
        }
    }
}
