//! Benchmark support of the kernels workspace: the `report` binary's machinery and the
//! baselines the criterion benches share with it.
//!
//! - [`report`]: the project's main command (`cargo run --release -p benches`), which measures
//!   every kernel on every ISA of this CPU against the scalar path, a plain Rust version, the
//!   `reference` oracle and a roofline measured in the same run.
//! - [`plain`]: what a user would write without this crate (the "plain Rust" baselines).
//! - [`buffers`]: input and output buffers placed deliberately, identically for a kernel and
//!   its baselines (4K aliasing moves timings by 20–40% otherwise).
//! - [`roofline`]: the machine's limits measured in-process: copy bandwidth and FMA peak.
//! - [`storage`]: half-typed tensors inside those f32 buffers, for the f16/bf16 rows.
//! - [`composed`]: the unfused attention (GEMM, softmax, GEMM) on the gemm and matrixmultiply
//!   crates, the baseline of the fused kernel.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod buffers;
pub mod composed;
pub mod data;
pub mod plain;
pub mod report;
pub mod roofline;
pub mod storage;
