//! `embed MODEL_DIR [--isa NAME] [--batch N] [--threads N]`: sentence embeddings of the lines
//! of stdin, one JSON array of floats a line on stdout, in order. `N` lines (default 8) run as
//! one batch, padded to the longest; `--isa` picks the kernels' ISA (default: the best this CPU
//! has); `--threads` the threads each kernel call is split over (default: every core; the
//! embeddings are the same bits for any count).

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use examples::{Model, Scratch};
use kernels::{Isa, Kernels, Parallelism};

const USAGE: &str = "usage: embed MODEL_DIR [--isa scalar|avx2|avx512|neon] [--batch N] [--threads N] < lines";

struct Args {
    dir: PathBuf,
    isa: Option<Isa>,
    batch: usize,
    parallelism: Parallelism,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut dir, mut isa, mut batch) = (None, None, 8);
    let mut parallelism = Parallelism::Rayon(0);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--isa" => {
                let name = args.next().ok_or("--isa needs a name")?;
                isa = Some(name.parse::<Isa>().map_err(|e| format!("--isa {name}: {e}"))?);
            }
            "--batch" => {
                let n = args.next().ok_or("--batch needs a number")?;
                batch = match n.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--batch {n}: expected a positive integer")),
                };
            }
            "--threads" => {
                let n = args.next().ok_or("--threads needs a number")?;
                parallelism = match n.parse::<usize>() {
                    Ok(1) => Parallelism::Sequential,
                    Ok(n) if n > 1 => Parallelism::Rayon(n),
                    _ => return Err(format!("--threads {n}: expected a positive integer")),
                };
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument {a}\n{USAGE}")),
        }
    }
    Ok(Args {
        dir: dir.ok_or(USAGE)?,
        isa,
        batch,
        parallelism,
    })
}

fn run() -> Result<(), Option<String>> {
    let args = parse(std::env::args().skip(1)).map_err(Some)?;
    let kernels = match args.isa {
        Some(isa) => Kernels::for_isa(isa).map_err(|e| Some(format!("--isa: {e}")))?,
        None => Kernels::best(),
    }
    .with_parallelism(args.parallelism);
    let model = Model::load(&args.dir, kernels).map_err(|e| Some(e.to_string()))?;
    let mut scratch = Scratch::default();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut lines = std::io::stdin().lock().lines();
    let mut number = 0;
    loop {
        let mut batch = Vec::with_capacity(args.batch);
        for line in lines.by_ref().take(args.batch) {
            number += 1;
            let line = line.map_err(|e| Some(format!("stdin: {e}")))?;
            batch.push(model.tokenize(&line).map_err(|e| Some(format!("line {number}: {e}")))?);
        }
        if batch.is_empty() {
            break;
        }
        for embedding in model.embed_ids(&batch, &mut scratch).map_err(|e| Some(e.to_string()))? {
            let mut text = String::with_capacity(embedding.len() * 12);
            text.push('[');
            for (i, v) in embedding.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                // Rust's shortest round-trip form: reading it back gives the same f32.
                text.push_str(&v.to_string());
            }
            text.push(']');
            writeln!(out, "{text}").map_err(stdout_error)?;
        }
    }
    out.flush().map_err(stdout_error)
}

/// The message of a failed write; `None` when the reader closed the pipe (`| head`), which
/// ends the run without error.
fn stdout_error(e: std::io::Error) -> Option<String> {
    (e.kind() != std::io::ErrorKind::BrokenPipe).then(|| format!("stdout: {e}"))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) | Err(None) => ExitCode::SUCCESS,
        Err(Some(e)) => {
            eprintln!("embed: {e}");
            ExitCode::FAILURE
        }
    }
}
