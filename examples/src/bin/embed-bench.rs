//! `embed-bench MODEL_DIR --batch B --tokens T [--threads N] [--seconds S]`: the speed of the
//! encoder on synthetic token ids, for `scripts/peers/encoder_peers.py --rust-cmd`. Loads the
//! checkpoint, runs two passes to warm up, then whole passes of `B` sequences of `T` ids (all
//! tokens, no padding) for about `S` seconds (default 0.25), and prints one JSON line,
//! `{"sentences_per_s": ...}`. `--threads` as for `embed` (default: every core).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use examples::{Model, Scratch};
use kernels::{Kernels, Parallelism};

const USAGE: &str = "usage: embed-bench MODEL_DIR --batch B --tokens T [--threads N] [--seconds S]";

fn positive(flag: &str, value: Option<String>) -> Result<usize, String> {
    let v = value.ok_or(format!("{flag} needs a number"))?;
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} {v}: expected a positive integer")),
    }
}

fn run() -> Result<f64, String> {
    let mut args = std::env::args().skip(1);
    let (mut dir, mut batch, mut tokens, mut seconds) = (None, None, None, 0.25f64);
    let mut parallelism = Parallelism::Rayon(0);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--batch" => batch = Some(positive("--batch", args.next())?),
            "--tokens" => tokens = Some(positive("--tokens", args.next())?),
            "--threads" => {
                parallelism = match positive("--threads", args.next())? {
                    1 => Parallelism::Sequential,
                    n => Parallelism::Rayon(n),
                }
            }
            "--seconds" => {
                let v = args.next().ok_or("--seconds needs a number")?;
                seconds = match v.parse::<f64>() {
                    Ok(s) if s > 0.0 && s.is_finite() => s,
                    _ => return Err(format!("--seconds {v}: expected a positive number")),
                };
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument {a}\n{USAGE}")),
        }
    }
    let (dir, batch, tokens) = match (dir, batch, tokens) {
        (Some(d), Some(b), Some(t)) => (d, b, t),
        _ => return Err(USAGE.into()),
    };
    let model = Model::load(&dir, Kernels::best().with_parallelism(parallelism)).map_err(|e| e.to_string())?;
    // Ids past the special tokens, spread over the vocabulary, the same for every run.
    let vocab = model.config().vocab as u64;
    let ids: Vec<Vec<u32>> = (0..batch as u64)
        .map(|b| {
            (0..tokens as u64)
                .map(|i| (1000 + (b * 7919 + i * 104_729) % (vocab - 1000)) as u32)
                .collect()
        })
        .collect();
    let mut scratch = Scratch::default();
    for _ in 0..2 {
        model.embed_ids(&ids, &mut scratch).map_err(|e| e.to_string())?;
    }
    let (mut passes, start) = (0u32, Instant::now());
    while passes < 3 || start.elapsed().as_secs_f64() < seconds {
        model.embed_ids(&ids, &mut scratch).map_err(|e| e.to_string())?;
        passes += 1;
    }
    Ok(batch as f64 * passes as f64 / start.elapsed().as_secs_f64())
}

fn main() -> ExitCode {
    match run() {
        Ok(rate) => {
            println!("{{\"sentences_per_s\": {rate}}}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("embed-bench: {message}");
            ExitCode::FAILURE
        }
    }
}
