//! A sentence-transformers BERT model from its directory: `config.json`, `model.safetensors`,
//! `tokenizer.json`, and the pooling of `modules.json` / `1_Pooling/config.json`.

use std::fmt;
use std::path::{Path, PathBuf};

use kernels::{Kernels, LayerNormOptions};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::encoder::{Block, Encoder, EncoderConfig, LayerWeights, Scratch};

/// Why a model could not be loaded or run: a message that names the file, the field or the
/// input at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<kernels::Error> for Error {
    fn from(e: kernels::Error) -> Self {
        Error(format!("kernels: {e}"))
    }
}

fn err<T>(message: impl Into<String>) -> Result<T, Error> {
    Err(Error(message.into()))
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error(format!("{}: {e}", path.display())))
}

fn read_json(path: &Path) -> Result<Value, Error> {
    serde_json::from_slice(&read(path)?).map_err(|e| Error(format!("{}: {e}", path.display())))
}

/// What a sentence embedding is made of after the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pooling {
    /// Mean over the tokens (the only pooling supported).
    pub mean: bool,
    /// L2 normalization after pooling (a `Normalize` module).
    pub normalize: bool,
}

/// The fields of `config.json` the encoder uses, checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BertConfig {
    /// The layer sizes.
    pub encoder: EncoderConfig,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `max_position_embeddings`: the longest sequence, special tokens included.
    pub max_positions: usize,
    /// `vocab_size`.
    pub vocab: usize,
}

impl BertConfig {
    /// Reads and checks `config.json`: an absolute-position BERT with the erf GELU.
    ///
    /// # Errors
    /// The file unreadable, a field missing or of the wrong type, or a configuration the
    /// encoder does not compute (naming the field).
    pub fn from_file(path: &Path) -> Result<BertConfig, Error> {
        let v = read_json(path)?;
        let file = path.display();
        let size = |name: &str| -> Result<usize, Error> {
            match v.get(name).and_then(Value::as_u64) {
                Some(n) if n > 0 => Ok(n as usize),
                _ => err(format!("{file}: `{name}` must be a positive integer")),
            }
        };
        let text = |name: &str, default: &str| -> Result<String, Error> {
            match v.get(name) {
                None => Ok(default.to_string()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => err(format!("{file}: `{name}` must be a string, not {other}")),
            }
        };
        let act = text("hidden_act", "")?;
        if act != "gelu" {
            return err(format!(
                "{file}: `hidden_act` is {act:?}; only \"gelu\" (the erf form) is supported"
            ));
        }
        let position = text("position_embedding_type", "absolute")?;
        if position != "absolute" {
            return err(format!(
                "{file}: `position_embedding_type` is {position:?}; only \"absolute\" is supported"
            ));
        }
        let (hidden, heads) = (size("hidden_size")?, size("num_attention_heads")?);
        if hidden % heads != 0 {
            return err(format!(
                "{file}: `hidden_size` {hidden} is not a multiple of `num_attention_heads` {heads}"
            ));
        }
        let eps = match v.get("layer_norm_eps").and_then(Value::as_f64) {
            Some(e) if e > 0.0 && (e as f32) > 0.0 && e.is_finite() => e as f32,
            _ => return err(format!("{file}: `layer_norm_eps` must be a positive number")),
        };
        Ok(BertConfig {
            encoder: EncoderConfig {
                block: Block::PostLn,
                hidden,
                heads,
                intermediate: size("intermediate_size")?,
                eps,
            },
            layers: size("num_hidden_layers")?,
            max_positions: size("max_position_embeddings")?,
            vocab: size("vocab_size")?,
        })
    }
}

/// Reads the pooling from `modules.json` (which names the pooling directory and whether a
/// `Normalize` module follows) or, without it, from `1_Pooling/config.json` with
/// normalization.
fn read_pooling(dir: &Path) -> Result<Pooling, Error> {
    let modules_path = dir.join("modules.json");
    let (pool_dir, normalize) = if modules_path.exists() {
        let modules = read_json(&modules_path)?;
        let list = modules
            .as_array()
            .ok_or_else(|| Error(format!("{}: expected an array of modules", modules_path.display())))?;
        let kind = |m: &Value| m.get("type").and_then(Value::as_str).unwrap_or("").to_string();
        let pool = list.iter().find(|m| kind(m).ends_with(".Pooling")).ok_or_else(|| {
            Error(format!(
                "{}: no sentence_transformers.models.Pooling module",
                modules_path.display()
            ))
        })?;
        let path = pool.get("path").and_then(Value::as_str).unwrap_or("1_Pooling");
        (dir.join(path), list.iter().any(|m| kind(m).ends_with(".Normalize")))
    } else {
        (dir.join("1_Pooling"), true)
    };
    let path = pool_dir.join("config.json");
    let v = read_json(&path)?;
    let flag = |name: &str| v.get(name).and_then(Value::as_bool).unwrap_or(false);
    let others = [
        "pooling_mode_cls_token",
        "pooling_mode_max_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
        "pooling_mode_lasttoken",
    ];
    if !flag("pooling_mode_mean_tokens") {
        return err(format!(
            "{}: only `pooling_mode_mean_tokens` is supported",
            path.display()
        ));
    }
    if let Some(other) = others.iter().find(|name| flag(name)) {
        return err(format!(
            "{}: `{other}` is not supported (mean pooling only)",
            path.display()
        ));
    }
    Ok(Pooling { mean: true, normalize })
}

/// The tensors of `model.safetensors`, read by name into f32.
struct Tensors<'a> {
    file: PathBuf,
    st: SafeTensors<'a>,
}

impl Tensors<'_> {
    /// The tensor `name`, which must be F32 of `shape`.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, Error> {
        let file = self.file.display();
        let t = self
            .st
            .tensor(name)
            .map_err(|e| Error(format!("{file}: tensor `{name}`: {e}")))?;
        if t.dtype() != Dtype::F32 {
            return err(format!("{file}: tensor `{name}` is {:?}, expected F32", t.dtype()));
        }
        if t.shape() != shape {
            return err(format!(
                "{file}: tensor `{name}` has shape {:?}, expected {shape:?}",
                t.shape()
            ));
        }
        Ok(t.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// A linear layer's `[out, in]` weight and its bias.
    fn linear(&self, prefix: &str, out: usize, inp: usize) -> Result<(Vec<f32>, Vec<f32>), Error> {
        Ok((
            self.get(&format!("{prefix}.weight"), &[out, inp])?,
            self.get(&format!("{prefix}.bias"), &[out])?,
        ))
    }

    /// A layer norm's gain and bias.
    fn norm(&self, prefix: &str, d: usize) -> Result<(Vec<f32>, Vec<f32>), Error> {
        Ok((
            self.get(&format!("{prefix}.weight"), &[d])?,
            self.get(&format!("{prefix}.bias"), &[d])?,
        ))
    }
}

/// A BERT sentence encoder: tokenizer, embeddings, the [`Encoder`] stack, pooling.
pub struct Model {
    config: BertConfig,
    pooling: Pooling,
    tokenizer: Tokenizer,
    /// `[vocab, hidden]`.
    word: Vec<f32>,
    /// `[max_positions, hidden]`.
    position: Vec<f32>,
    /// The token-type 0 row, `[hidden]` (single sentences only).
    token_type: Vec<f32>,
    embedding_norm: (Vec<f32>, Vec<f32>),
    encoder: Encoder,
}

impl Model {
    /// Loads a sentence-transformers model directory for `kernels`. The tokenizer's own
    /// truncation and padding are turned off: [`Model::tokenize`] rejects a text longer than
    /// the position table, and a batch is padded to its longest text.
    ///
    /// # Errors
    /// A file missing or unreadable, a tensor missing or of the wrong dtype or shape, or an
    /// unsupported configuration, each naming the file and the field or tensor.
    pub fn load(dir: &Path, kernels: Kernels) -> Result<Model, Error> {
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        let pooling = read_pooling(dir)?;
        let tokenizer_path = dir.join("tokenizer.json");
        if !tokenizer_path.is_file() {
            return err(format!("{}: no such file", tokenizer_path.display()));
        }
        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| Error(format!("{}: {e}", tokenizer_path.display())))?;
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error(format!("{}: {e}", tokenizer_path.display())))?;
        tokenizer.with_padding(None);

        let file = dir.join("model.safetensors");
        let bytes = read(&file)?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| Error(format!("{}: {e}", file.display())))?;
        let t = Tensors { file, st };
        let EncoderConfig {
            hidden: h,
            intermediate: f,
            ..
        } = config.encoder;
        let word = t.get("embeddings.word_embeddings.weight", &[config.vocab, h])?;
        let position = t.get("embeddings.position_embeddings.weight", &[config.max_positions, h])?;
        let types =
            t.st.tensor("embeddings.token_type_embeddings.weight")
                .map(|v| v.shape().to_vec());
        let type_rows = types.ok().and_then(|s| s.first().copied()).unwrap_or(0);
        let token_type = t.get("embeddings.token_type_embeddings.weight", &[type_rows.max(1), h])?[..h].to_vec();
        let embedding_norm = t.norm("embeddings.LayerNorm", h)?;
        let layers = (0..config.layers)
            .map(|n| {
                let p = format!("encoder.layer.{n}");
                let (q, qb) = t.linear(&format!("{p}.attention.self.query"), h, h)?;
                let (k, kb) = t.linear(&format!("{p}.attention.self.key"), h, h)?;
                let (v, vb) = t.linear(&format!("{p}.attention.self.value"), h, h)?;
                let (out, out_bias) = t.linear(&format!("{p}.attention.output.dense"), h, h)?;
                let (up, up_bias) = t.linear(&format!("{p}.intermediate.dense"), f, h)?;
                let (down, down_bias) = t.linear(&format!("{p}.output.dense"), h, f)?;
                Ok(LayerWeights {
                    qkv: [q, k, v].concat(),
                    qkv_bias: [qb, kb, vb].concat(),
                    out,
                    out_bias,
                    ln1: t.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                    up,
                    up_bias,
                    down,
                    down_bias,
                    ln2: t.norm(&format!("{p}.output.LayerNorm"), h)?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let encoder = Encoder::new(kernels, config.encoder, &layers)?;
        Ok(Model {
            config,
            pooling,
            tokenizer,
            word,
            position,
            token_type,
            embedding_norm,
            encoder,
        })
    }

    /// The checked `config.json`.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The pooling after the encoder.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// The encoder stack (and through it the [`Kernels`] it runs on).
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// The token ids of `text`, `[CLS] … [SEP]`.
    ///
    /// # Errors
    /// A text of more tokens than `max_position_embeddings` (not truncated: that would embed
    /// a different text), or a tokenizer failure.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, Error> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| Error(format!("tokenizer: {e}")))?;
        let ids = encoding.get_ids().to_vec();
        if ids.len() > self.config.max_positions {
            return err(format!(
                "a text of {} tokens is longer than `max_position_embeddings` ({}); \
                 split it (the first characters: {:?})",
                ids.len(),
                self.config.max_positions,
                text.chars().take(40).collect::<String>()
            ));
        }
        Ok(ids)
    }

    /// The sentence embeddings of token sequences (as [`Model::tokenize`] gives), batched
    /// together: each is padded to the longest.
    ///
    /// # Errors
    /// A sequence that is empty, longer than the position table, or holds an id outside the
    /// vocabulary.
    pub fn embed_ids(&self, batch: &[Vec<u32>], scratch: &mut Scratch) -> Result<Vec<Vec<f32>>, Error> {
        let h = self.config.encoder.hidden;
        let len = batch.iter().map(Vec::len).max().unwrap_or(0);
        if batch.is_empty() {
            return Ok(vec![]);
        }
        if let Some(i) = batch.iter().position(Vec::is_empty) {
            return err(format!("sequence {i} of the batch is empty"));
        }
        if len > self.config.max_positions {
            return err(format!(
                "a sequence of {len} tokens is longer than `max_position_embeddings` ({})",
                self.config.max_positions
            ));
        }
        // Embeddings: word + position + token type 0, then the embedding layer norm.
        let mut x = vec![0.0f32; batch.len() * len * h];
        let mut padding = vec![f32::NEG_INFINITY; batch.len() * len];
        for (b, ids) in batch.iter().enumerate() {
            for t in 0..len {
                // Padded rows embed id 0 (`[PAD]`); their values only feed padded outputs.
                let id = ids.get(t).copied().unwrap_or(0) as usize;
                if id >= self.config.vocab {
                    return err(format!(
                        "token id {id} is outside the vocabulary ({})",
                        self.config.vocab
                    ));
                }
                let row = &mut x[(b * len + t) * h..][..h];
                let (w, p) = (&self.word[id * h..][..h], &self.position[t * h..][..h]);
                for (((r, &w), &p), &t) in row.iter_mut().zip(w).zip(p).zip(&self.token_type) {
                    *r = w + p + t;
                }
            }
            padding[b * len..b * len + ids.len()].fill(0.0);
        }
        let k = self.encoder.kernels();
        let norm = LayerNormOptions {
            gamma: Some(&self.embedding_norm.0),
            beta: Some(&self.embedding_norm.1),
            eps: self.config.encoder.eps,
        };
        k.layer_norm_inplace(&mut x, h, &norm)?;
        self.encoder.forward(&mut x, batch.len(), len, &padding, scratch)?;
        // Mean over the sequence's own tokens, then L2 normalization, in f64.
        Ok(batch
            .iter()
            .enumerate()
            .map(|(b, ids)| {
                let mut sum = vec![0.0f64; h];
                for t in 0..ids.len() {
                    for (s, &v) in sum.iter_mut().zip(&x[(b * len + t) * h..][..h]) {
                        *s += v as f64;
                    }
                }
                let n = ids.len() as f64;
                sum.iter_mut().for_each(|s| *s /= n);
                if self.pooling.normalize {
                    let norm = sum.iter().map(|s| s * s).sum::<f64>().sqrt().max(1e-12);
                    sum.iter_mut().for_each(|s| *s /= norm);
                }
                sum.into_iter().map(|s| s as f32).collect()
            })
            .collect())
    }

    /// The sentence embeddings of `texts`, in one batch.
    ///
    /// # Errors
    /// As [`Model::tokenize`] and [`Model::embed_ids`].
    pub fn embed(&self, texts: &[&str], scratch: &mut Scratch) -> Result<Vec<Vec<f32>>, Error> {
        let ids = texts.iter().map(|t| self.tokenize(t)).collect::<Result<Vec<_>, _>>()?;
        self.embed_ids(&ids, scratch)
    }
}
