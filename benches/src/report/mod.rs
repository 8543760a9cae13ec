//! The report: every kernel × ISA × shape of the registry, measured in one run against the
//! scalar path, plain Rust, the `reference` oracle and the machine's roofline.
//!
//! # Adding a kernel's rows
//!
//! Write a module like [`softmax`]: one small function per kernel that returns a [`Case`]
//! for a shape (usually through [`Case::elementwise`]: the input, the call on a given ISA,
//! the plain Rust version, the oracle), a `cases` function listing the shapes (full and
//! `--quick`), optionally a `goals` function that reads the issue's goals off the rows, and a
//! `FAMILY` constant. Then add that constant to [`FAMILIES`]. Timing, buffer placement, error
//! measurement, rooflines and printing are shared.
//!
//! A kernel that does not fit one input and one output, or whose oracle is too slow for the
//! whole output, returns [`Custom`] cases instead, with a driver of its own built from the
//! same parts (see [`attention`]).

mod accuracy;
pub mod activation;
pub mod attention;
mod case;
pub mod gau;
pub mod half;
mod machine;
pub mod norm;
mod output;
pub mod softmax;
mod timing;

use std::fmt;
use std::io::Write;

use kernels::{Isa, Kernels};

pub use case::{Case, Context, Custom, Rule};
pub use output::Row;
pub use timing::Timing;

use crate::buffers;

/// A row this much faster than its roofline means the roofline is not a limit.
const ABOVE_ROOFLINE: f64 = 1.1;

/// A group of kernels that share a module of the report.
pub struct Family {
    /// The kernel names its cases use (what `--kernel` accepts).
    pub kernels: &'static [&'static str],
    /// Its cases for a plan.
    pub cases: fn(&Plan) -> Vec<Case>,
    /// Its cases with a driver of their own, measured after `cases`.
    pub custom: fn(&Plan) -> Vec<Custom>,
    /// The issue whose goals `goals` reads.
    pub issue: u32,
    /// Lines that read the issue's goals off the measured rows (may be empty).
    pub goals: fn(&[Row]) -> Vec<String>,
}

/// For a family without [`Custom`] cases.
pub fn no_custom(_: &Plan) -> Vec<Custom> {
    Vec::new()
}

/// For a family without goal lines.
pub fn no_goals(_: &[Row]) -> Vec<String> {
    Vec::new()
}

/// Every family of the report, in printing order. Add a line here to add a kernel's rows.
pub const FAMILIES: &[Family] = &[
    softmax::FAMILY,
    activation::FAMILY,
    attention::FAMILY,
    norm::FAMILY,
    gau::FAMILY,
    half::FAMILY,
];

/// What the run covers.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// `--quick`: fewer shapes.
    pub quick: bool,
}

impl Plan {
    /// `full`, or `quick` under `--quick`.
    pub fn pick<'a, T>(&self, full: &'a [T], quick: &'a [T]) -> &'a [T] {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

/// An error that stops the report, with a message for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportError {
    /// What went wrong, naming the case or the argument.
    pub message: String,
    /// The output was closed early (`report | head`): nothing to tell the user.
    pub broken_pipe: bool,
}

impl ReportError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> ReportError {
        ReportError {
            message: message.into(),
            broken_pipe: false,
        }
    }

    fn io(e: std::io::Error) -> ReportError {
        ReportError {
            message: format!("cannot write the report: {e}"),
            broken_pipe: e.kind() == std::io::ErrorKind::BrokenPipe,
        }
    }
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ReportError {}

/// The command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `--quick`: fewer shapes and rounds, under 30 s.
    pub quick: bool,
    /// `--json`: one JSON object per row and line, nothing else on stdout.
    pub json: bool,
    /// `--kernel a,b`: only these kernels (`roofline` for the machine rows).
    pub kernels: Option<Vec<String>>,
    /// `--isa a,b`: only these ISAs (`plain` for the plain Rust rows).
    pub isas: Option<Vec<String>>,
    /// `--rounds N`: rounds of interleaved timing.
    pub rounds: Option<usize>,
    /// `--out-offset B`: output placement, see [`crate::buffers`].
    pub out_offset: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            quick: false,
            json: false,
            kernels: None,
            isas: None,
            rounds: None,
            out_offset: buffers::DEFAULT_OUT_OFFSET,
        }
    }
}

/// The usage text of `--help`.
pub const USAGE: &str = "\
usage: report [--quick] [--json] [--kernel NAMES] [--isa NAMES] [--rounds N] [--out-offset BYTES]

Measures every kernel on every ISA of this CPU, against the scalar path, plain Rust, the
f64 oracle (`reference`) and a roofline measured in the same run.

  --quick             fewer shapes and rounds (under 30 s)
  --json              one JSON object per line and row, nothing else on stdout
  --kernel NAMES      comma-separated kernels to run, e.g. softmax,exp (roofline: machine rows)
  --isa NAMES         comma-separated ISAs to print, e.g. avx2,avx512 (plain: plain Rust rows)
  --rounds N          rounds of interleaved timing (default 31, quick 7)
  --out-offset BYTES  output placement past the input's next page boundary (default 2048;
                      0 puts input and output at the same page offset: 4K aliasing)
  -h, --help          this text";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run the report.
    Run(Options),
    /// Print the usage.
    Help,
}

/// Parses the arguments (without the program name).
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, ReportError> {
    let mut o = Options::default();
    let mut args = args.into_iter();
    let list = |v: String| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| ReportError::new(format!("{name} needs a value\n\n{USAGE}")))
        };
        match flag.as_str() {
            "--quick" => o.quick = true,
            "--json" => o.json = true,
            "-h" | "--help" => return Ok(Command::Help),
            "--kernel" => o.kernels = Some(list(value("--kernel")?)),
            "--isa" => o.isas = Some(list(value("--isa")?)),
            "--rounds" => {
                let v = value("--rounds")?;
                match v.parse::<usize>() {
                    Ok(n) if n > 0 => o.rounds = Some(n),
                    _ => {
                        return Err(ReportError::new(format!(
                            "--rounds: expected a positive integer, got `{v}`"
                        )))
                    }
                }
            }
            "--out-offset" => {
                let v = value("--out-offset")?;
                o.out_offset = v
                    .parse()
                    .map_err(|_| ReportError::new(format!("--out-offset: expected a number of bytes, got `{v}`")))?;
            }
            _ => return Err(ReportError::new(format!("unknown argument `{arg}`\n\n{USAGE}"))),
        }
    }
    Ok(Command::Run(o))
}

/// Runs the report, writing to `out`.
pub fn run(opts: &Options, out: &mut dyn Write) -> Result<(), ReportError> {
    let io = ReportError::io;
    let plan = Plan { quick: opts.quick };
    let timing = Timing {
        rounds: opts.rounds.unwrap_or(if opts.quick { 7 } else { 31 }),
        sample_ns: if opts.quick { 1e6 } else { 5e6 },
    };

    // ISAs: every available one is a candidate; the scalar path always runs (vs_scalar).
    let available = kernels::available_isas();
    let (printed, print_plain) = match &opts.isas {
        None => (available.clone(), true),
        Some(names) => {
            let mut printed = Vec::new();
            let mut plain = false;
            for name in names {
                if name == "plain" {
                    plain = true;
                    continue;
                }
                let isa: Isa = name.parse().map_err(|_| {
                    ReportError::new(format!(
                        "--isa: unknown ISA `{name}`; expected some of scalar, avx2, avx512, neon, plain"
                    ))
                })?;
                isa.check().map_err(|e| ReportError::new(format!("--isa: {e}")))?;
                printed.push(isa);
            }
            (printed, plain)
        }
    };
    let mut measured = Vec::new();
    for &isa in &available {
        if isa == Isa::Scalar || printed.contains(&isa) {
            measured.push(Kernels::for_isa(isa).map_err(|e| ReportError::new(format!("cannot use {isa}: {e}")))?);
        }
    }

    // Kernels.
    let known: Vec<&str> = FAMILIES.iter().flat_map(|f| f.kernels.iter().copied()).collect();
    if let Some(names) = &opts.kernels {
        for name in names {
            if name != "roofline" && !known.contains(&name.as_str()) {
                return Err(ReportError::new(format!(
                    "--kernel: unknown kernel `{name}`; expected some of roofline, {}",
                    known.join(", ")
                )));
            }
        }
    }
    let selected = |name: &str| opts.kernels.as_ref().is_none_or(|k| k.iter().any(|n| n == name));

    let l2 = crate::roofline::cache_size(2);
    let ctx = Context {
        kernels: measured,
        printed,
        print_plain,
        l2_bytes: l2.unwrap_or(1 << 20),
        out_offset: opts.out_offset,
        timing,
    };

    let emit = |out: &mut dyn Write, row: &Row| -> Result<(), ReportError> {
        if opts.json {
            writeln!(out, "{}", row.json()).map_err(io)?;
        } else {
            writeln!(out, "{}", output::table_line(row)).map_err(io)?;
        }
        out.flush().map_err(io)
    };

    if !opts.json {
        write!(out, "{}", header(&ctx, l2, opts)).map_err(io)?;
        writeln!(out, "{}", output::table_header()).map_err(io)?;
    }
    if selected("roofline") {
        for row in machine::rows(&ctx)? {
            emit(out, &row)?;
        }
    }
    let mut goals: Vec<(u32, Vec<String>)> = Vec::new();
    let mut above_roofline = Vec::new();
    let mut notes = Vec::new();
    for family in FAMILIES {
        let mut rows = Vec::new();
        for case in (family.cases)(&plan).into_iter().filter(|c| selected(c.kernel)) {
            for row in case::measure(&case, &ctx)? {
                emit(out, &row)?;
                rows.push(row);
            }
        }
        for case in (family.custom)(&plan).into_iter().filter(|c| selected(c.kernel)) {
            for row in (case.measure)(&ctx)? {
                emit(out, &row)?;
                rows.push(row);
            }
        }
        let lines = (family.goals)(&rows);
        if !lines.is_empty() {
            match goals.iter_mut().find(|(issue, _)| *issue == family.issue) {
                Some((_, g)) => g.extend(lines),
                None => goals.push((family.issue, lines)),
            }
        }
        for r in rows.iter().filter(|r| r.within_bound == Some(false)) {
            notes.push(format!("{} {} {}", r.kernel, r.isa, r.shape));
        }
        for r in &rows {
            if let (Some(name), Some(q)) = (&r.roofline, r.roofline_ratio) {
                if q > ABOVE_ROOFLINE && !above_roofline.contains(name) {
                    above_roofline.push(name.clone());
                }
            }
        }
    }
    if !opts.json {
        for (issue, lines) in goals {
            writeln!(out, "\ngoals of issue {issue} (ratios from this run):").map_err(io)?;
            for g in lines {
                writeln!(out, "  {g}").map_err(io)?;
            }
        }
    }
    if !opts.json && !notes.is_empty() {
        writeln!(
            out,
            "\nERROR BOUND BROKEN (max_rel marked !): {}. The kernel's output is outside its documented bound \
             against the oracle: a bug to report.",
            notes.join(", ")
        )
        .map_err(io)?;
    }
    if !opts.json && !above_roofline.is_empty() {
        writeln!(
            out,
            "\nnote: some rows run faster than their roofline (xroof > {ABOVE_ROOFLINE}): {}. That \"roofline\" is \
             then not a limit in this run (a slow reference implementation, or noise); read those ratios with care.",
            above_roofline.join(", ")
        )
        .map_err(io)?;
    }
    Ok(())
}

/// The explanation printed above the table.
fn header(ctx: &Context, l2: Option<usize>, opts: &Options) -> String {
    let isas: Vec<String> = ctx.kernels.iter().map(|k| k.isa().to_string()).collect();
    let l2 = match l2 {
        Some(b) => format!("L2 {} KiB (sysfs)", b >> 10),
        None => "L2 unknown, assumed 1 MiB".to_string(),
    };
    format!(
        "\
kernels report: {cpu}; {l2}; ISAs measured: {isas}; {mode}
buffers: {placement}
timing:  per case, plain Rust, every ISA's kernel and every ISA's roofline run interleaved on the same buffers,
         {rounds} rounds of ~{sample:.0} ms batches each (order shuffled per round), each after an untimed warm-up batch
         of the same contender (none where one call outlasts a batch); times are medians over rounds, ratios
         medians of per-round ratios. Inputs go through black_box, outputs are consumed. This machine is shared
         and noisy (2-3x between time windows): compare ratios within one run, not absolute figures across runs.
columns: GB/s counts the bytes an ideal kernel moves (x read once + y written once); Gelem/s output elements;
         GFLOP/s only where a FLOP count means something; time = median per call; max_ulp / max_rel vs the f64
         oracle (`reference`); xscalar, xplain = speedup over the scalar path and over plain Rust (f32::exp
         loops) in the same run; xgemm, xmm = attention's speedup over the unfused composition (per head a GEMM
         Q.K^T, Kernels::softmax of the row's ISA with scale and mask, a GEMM P.V) on the gemm crate / on
         matrixmultiply, single-threaded (both GEMMs pick their own best ISA: avx512 where the CPU has it; the
         goal lines also compare plain attention with the gemm crate around the plain scalar softmax);
         roofline = what the row is held against; xroof = roofline time / kernel time (1.0 = at the roofline);
         iqr = interquartile range of the kernel's times / median (noise); \"!\" after max_rel: outside the
         kernel's documented error bound.
roofline: softmax-like rows (softmax, sigmoid, swish) whose working set (x + y) exceeds L2, and exp rows: a copy
         of the same bytes with that ISA's vectors and ordinary (not streaming) stores, an intrinsics loop (not
         memcpy, which may switch to non-temporal stores), or streaming stores for the norm rows whose kernel
         streams its output (kernels::Kernels::streams at the row's working set); other rows: exp(ISA), the bare vectorized Kernels::exp
         of that ISA from x to y. Attention rows: fma peak(ISA), timed in the case's rounds, its fastest round
         (a hardware limit: noise only slows it) scaled to the row's FLOPs; xroof = that / the kernel's median. The scalar and plain rows use the scalar ISA's (baseline
         vectors: sse2/neon). `roofline` rows: the FMA peak (independent accumulators) and copy bandwidth (bytes
         read + written; method in brackets) at L1, L2 and beyond-LLC sizes.
attention: B=1, H=8, Dk=Dv=64, Lq=Lk=L; plain; realformer = P in and S out; causal; padded = key_lengths
         3L/4. Timed interleaved per round: each ISA's kernel, the same kernel without the row's options (for the
         causal and realformer goals), both compositions and the ISA's FMA peak; Q, K, V, P, O, S in one
         allocation, staggered by 1088 B mod 4 KiB. GFLOP/s count 4*D per visible (query, key) pair and head
         (4*L*L*D*H when dense); causal and padded rows count the pairs left after masking (the goal lines also
         give causal counted as if dense, the convention of PyTorch's figures). The scalar path runs one timed
         call at L=512 only (xscalar = that time / the kernel's median; \"-\" elsewhere); L=2048 cases run at most
         {long_rounds} rounds. max_rel = max |O - exact| / sum_j w_ij*|V_jd| (error relative to what the output
         averages) on sampled rows (heads 0 and 7; rows 0-15, L/2-8.., L-16..; the f64 oracle on the whole
         output is too slow at L=2048), checked with reference::check_attention (S too for realformer); ulps of
         near-zero averages are not shown.

",
        cpu = crate::roofline::cpu_name(),
        isas = isas.join(", "),
        mode = if opts.quick { "--quick" } else { "full run" },
        placement = buffers::describe(ctx.out_offset),
        rounds = ctx.timing.rounds,
        sample = ctx.timing.sample_ns / 1e6,
        long_rounds = attention::LONG_ROUNDS.min(ctx.timing.rounds),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Command, ReportError> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_flags() {
        let Ok(Command::Run(o)) = args("--quick --json --kernel softmax,exp --isa=avx2 --rounds 3") else {
            panic!("should parse");
        };
        assert!(o.quick && o.json);
        assert_eq!(o.kernels, Some(vec!["softmax".to_string(), "exp".to_string()]));
        assert_eq!(o.isas, Some(vec!["avx2".to_string()]));
        assert_eq!(o.rounds, Some(3));
        assert_eq!(args("--help"), Ok(Command::Help));
        assert!(args("--bogus").is_err());
        assert!(args("--rounds 0").is_err());
        assert!(args("--kernel").is_err());
    }

    #[test]
    fn unknown_names_are_reported() {
        let opts = Options {
            kernels: Some(vec!["nope".into()]),
            ..Options::default()
        };
        let err = run(&opts, &mut Vec::new()).unwrap_err();
        assert!(err.message.contains("unknown kernel `nope`"), "{err}");
        let opts = Options {
            isas: Some(vec!["sse9".into()]),
            ..Options::default()
        };
        let err = run(&opts, &mut Vec::new()).unwrap_err();
        assert!(err.message.contains("unknown ISA `sse9`"), "{err}");
    }
}
