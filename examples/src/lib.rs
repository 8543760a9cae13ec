//! A real model end to end on the `kernels` crate: a BERT-style encoder built from its calls
//! alone, and the sentence-transformers checkpoint all-MiniLM-L6-v2 run through it.
//!
//! - [`Encoder`]: a stack of Post-LN encoder layers, `x = LN(x + Attn(x))`,
//!   `x = LN(x + FFN(x))`: one fused QKV projection that attention reads in place, a
//!   key-padding mask, the GELU and both residuals fused into the linear layers (the pattern
//!   of the `kernels` crate docs, "One encoder layer"); also Pre-LN and RealFormer ([`Block`]).
//! - [`GauAlpha`]: a stack of GAU-α layers, `x = RMSNorm(x + GAU(x))`, the gated attention
//!   unit with softmax-plus and RoPE in one fused call; [`gau_alpha_f64`] is its f64 oracle.
//! - [`forward_f64`]: the same stack from the `reference` crate's f64 operations, the oracle of
//!   the stack test (`tests/stack.rs`).
//! - `Model` (the default feature `checkpoint`): a model directory (`config.json`, `model.safetensors`, `tokenizer.json`,
//!   the pooling module): embeddings, the encoder, mean pooling, L2 normalization.
//! - the `embed` binary: `embed MODEL_DIR [--isa NAME] [--batch N]`, one text a line on stdin,
//!   one JSON array of floats a line on stdout.
//!
//! The golden test (`tests/minilm.rs`) compares the embeddings with float64
//! sentence-transformers on every ISA; it needs the checkpoint (`scripts/fetch-minilm.sh`).

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod encoder;
mod gau_alpha;
#[cfg(feature = "checkpoint")]
mod model;
mod oracle;

pub use encoder::{Block, Encoder, EncoderConfig, Laps, LayerWeights, Profile, Scratch, Step};
pub use gau_alpha::{gau_alpha_f64, GauAlpha, GauAlphaConfig, GauAlphaWeights, GauScratch};
#[cfg(feature = "checkpoint")]
pub use model::{BertConfig, Error, Model, Pooling};
pub use oracle::forward_f64;
