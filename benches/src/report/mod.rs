//! The report: every kernel × ISA × shape of the registry, measured in one run against the
//! scalar path, plain Rust, the `reference` oracle and the machine's roofline; read against the
//! targets; printed as a verdict first, then the rows; drawn as an HTML page.
//!
//! # Adding a kernel's rows
//!
//! Write a module like [`softmax`]: one small function per kernel that returns a [`Case`]
//! for a shape (usually through [`Case::elementwise`]: the input, the call on a given ISA,
//! the plain Rust version, the oracle, and [`Case::with_bound`] with the kernel's
//! `reference::fraction` function), a `cases` function listing the shapes of each [`Scope`],
//! and a `FAMILY` constant naming the kernels and the headline shape of each for the summary.
//! Add that constant to [`FAMILIES`], and the kernel's targets to [`targets::TARGETS`].
//! Timing, buffer placement, error measurement, rooflines, the summary, JSON and the charts
//! are shared.
//!
//! A kernel that does not fit one input and one output, or whose oracle is too slow for the
//! whole output, returns [`Custom`] cases instead, with a driver of its own built from the
//! same parts (see [`attention`]).

mod accuracy;
pub mod activation;
pub mod attention;
mod case;
pub mod encoder;
pub mod gau;
pub mod gelu;
pub mod half;
mod html;
pub mod linear;
pub mod linear_streamed;
mod machine;
pub mod norm;
mod output;
mod record;
pub mod softmax;
mod summary;
pub mod targets;
pub mod threads;
mod timing;

use std::fmt;
use std::io::Write;
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kernels::{Isa, Kernels};

pub use case::{Case, Context, Custom, Rule};
pub use output::Row;
pub use summary::{Headline, Throughput};
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
    /// The summary's line of each of its kernels that has one.
    pub headlines: &'static [Headline],
}

/// For a family without [`Custom`] cases.
pub fn no_custom(_: &Plan) -> Vec<Custom> {
    Vec::new()
}

/// For a family with only [`Custom`] cases.
pub fn no_cases(_: &Plan) -> Vec<Case> {
    Vec::new()
}

/// Every family of the report, in printing order. Add a line here to add a kernel's rows.
pub const FAMILIES: &[Family] = &[
    softmax::FAMILY,
    activation::FAMILY,
    gelu::FAMILY,
    attention::FAMILY,
    norm::FAMILY,
    gau::FAMILY,
    linear::FAMILY,
    encoder::FAMILY,
    half::FAMILY,
    threads::FAMILY,
];

/// How much the run covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `--quick`: a few shapes, 7 short rounds (CI; under 30 s of measuring).
    Quick,
    /// The headline shapes of every family (in cache and beyond L2), 15 rounds.
    Default,
    /// `--full`: the whole sweep, 31 rounds.
    Full,
}

/// What the run covers.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// How much.
    pub scope: Scope,
}

impl Plan {
    /// The shapes of the plan's scope.
    pub fn pick<'a, T>(&self, full: &'a [T], default: &'a [T], quick: &'a [T]) -> &'a [T] {
        match self.scope {
            Scope::Full => full,
            Scope::Default => default,
            Scope::Quick => quick,
        }
    }

    /// The timing of the plan's scope: rounds and batch length.
    pub fn timing(&self) -> Timing {
        let (rounds, sample_ms) = match self.scope {
            Scope::Quick => (7, 1.0),
            Scope::Default => (15, 3.0),
            Scope::Full => (31, 5.0),
        };
        Timing {
            rounds,
            sample_ns: sample_ms * 1e6,
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
    /// `--quick` or `--full` (the default run otherwise).
    pub scope: Scope,
    /// `--json`: one JSON object per line (the run, every row, every target), nothing else on
    /// stdout.
    pub json: bool,
    /// `--record`: also write those JSON lines to `benches/records/<machine>-<date>.jsonl`
    /// (`…-<kernels>.jsonl` with `--kernel`).
    pub record: bool,
    /// `--html DIR`: where the HTML page goes (default: `report/` in the target directory).
    pub html: Option<PathBuf>,
    /// `--kernel a,b`: only these kernels (`roofline` for the machine rows).
    pub kernels: Option<Vec<String>>,
    /// `--isa a,b`: only these ISAs (`plain` for the plain Rust rows).
    pub isas: Option<Vec<String>>,
    /// `--rounds N`: rounds of interleaved timing.
    pub rounds: Option<usize>,
    /// `--out-offset B`: output placement, see [`crate::buffers`].
    pub out_offset: usize,
    /// `--threads N,M`: the thread counts of the `threads` rows, ascending (default: every
    /// core).
    pub threads: Vec<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scope: Scope::Default,
            json: false,
            record: false,
            html: None,
            kernels: None,
            isas: None,
            rounds: None,
            out_offset: buffers::DEFAULT_OUT_OFFSET,
            threads: vec![std::thread::available_parallelism().map_or(1, |n| n.get())],
        }
    }
}

/// The usage text of `--help`.
pub const USAGE: &str = "\
usage: report [--quick | --full] [--json] [--record] [--html DIR] [--kernel NAMES] [--isa NAMES]
              [--rounds N] [--out-offset BYTES] [--threads N[,N...]]

Measures every kernel on every ISA of this CPU against the scalar path, plain Rust, the
f64 oracle (`reference`) and a roofline measured in the same run; prints a summary with
the targets met, then the rows; writes an HTML page with charts.

  --quick             a few shapes, 7 rounds of 1 ms (under 30 s of measuring; CI)
  --full              the whole sweep of shapes, 31 rounds of 5 ms (default: the headline
                      shapes of every kernel, 15 rounds of 3 ms)
  --json              one JSON object per line (the run, each row, each target), nothing
                      else on stdout
  --record            also write those JSON lines to benches/records/<machine>-<date>.jsonl
                      (<machine>-<date>-<kernels>.jsonl with --kernel)
  --html DIR          where to write index.html and its charts (default: target/report)
  --kernel NAMES      comma-separated kernels to run, e.g. softmax,exp (roofline: machine rows)
  --isa NAMES         comma-separated ISAs to print, e.g. avx2,avx512 (plain: plain Rust rows)
  --rounds N          rounds of interleaved timing
  --out-offset BYTES  output placement past the input's next page boundary (default 2048;
                      0 puts input and output at the same page offset: 4K aliasing)
  --threads N,M       thread counts of the `threads` rows, each against one thread in the
                      same run (default: every core of the machine)
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
    let mut scopes = 0;
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
            "--quick" => {
                o.scope = Scope::Quick;
                scopes += 1;
            }
            "--full" => {
                o.scope = Scope::Full;
                scopes += 1;
            }
            "--json" => o.json = true,
            "--record" => o.record = true,
            "--html" => o.html = Some(PathBuf::from(value("--html")?)),
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
            "--threads" => {
                let v = value("--threads")?;
                let counts: Option<Vec<usize>> = v
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().ok().filter(|&n| n > 0))
                    .collect();
                match counts {
                    Some(mut counts) if !counts.is_empty() => {
                        counts.sort_unstable();
                        counts.dedup();
                        o.threads = counts;
                    }
                    _ => {
                        return Err(ReportError::new(format!(
                            "--threads: expected positive integers separated by commas, got `{v}`"
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
    if scopes > 1 {
        return Err(ReportError::new("--quick and --full exclude each other"));
    }
    Ok(Command::Run(o))
}

/// One unit of the run's work: a case, or a case with its own driver.
enum Work {
    Case(Case),
    Custom(Custom),
}

impl Work {
    fn name(&self) -> String {
        match self {
            Work::Case(c) => format!("{} {} {}", c.kernel, c.dtype, c.shape),
            Work::Custom(c) => format!("{} {}", c.kernel, c.shape),
        }
    }

    fn measure(&self, ctx: &Context) -> Result<Vec<Row>, ReportError> {
        match self {
            Work::Case(c) => case::measure(c, ctx),
            Work::Custom(c) => (c.measure)(ctx),
        }
    }
}

/// Runs the report, writing to `out`; progress goes to stderr (hidden where it is not a
/// terminal).
pub fn run(opts: &Options, out: &mut dyn Write) -> Result<(), ReportError> {
    let io = ReportError::io;
    let plan = Plan { scope: opts.scope };
    let timing = Timing {
        rounds: opts.rounds.unwrap_or(plan.timing().rounds),
        ..plan.timing()
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
        threads: opts.threads.clone(),
    };
    let run = record::Run::now(&ctx, l2, opts.scope, opts.kernels.clone());

    // The first line at once: the machine and what the run covers.
    let mut json_lines = vec![run.json()];
    if opts.json {
        writeln!(out, "{}", json_lines[0]).map_err(io)?;
    } else {
        writeln!(out, "{}", run.headline()).map_err(io)?;
    }
    out.flush().map_err(io)?;

    let mut work: Vec<Work> = Vec::new();
    for family in FAMILIES {
        work.extend(
            (family.cases)(&plan)
                .into_iter()
                .filter(|c| selected(c.kernel))
                .map(Work::Case),
        );
        work.extend(
            (family.custom)(&plan)
                .into_iter()
                .filter(|c| selected(c.kernel))
                .map(Work::Custom),
        );
    }
    let progress = ProgressBar::with_draw_target(
        Some(work.len() as u64 + u64::from(selected("roofline"))),
        ProgressDrawTarget::stderr(),
    );
    progress.set_style(
        ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );

    let mut rows: Vec<Row> = Vec::new();
    let mut emit = |out: &mut dyn Write, new: Vec<Row>| -> Result<(), ReportError> {
        for row in new {
            let line = row.json();
            if opts.json {
                writeln!(out, "{line}").map_err(io)?;
            }
            json_lines.push(line);
            rows.push(row);
        }
        out.flush().map_err(io)
    };
    if selected("roofline") {
        progress.set_message("roofline: FMA peak and copy bandwidth");
        emit(out, machine::rows(&ctx)?)?;
        progress.inc(1);
    }
    for w in &work {
        progress.set_message(w.name());
        let new = w.measure(&ctx)?;
        emit(out, new)?;
        progress.inc(1);
    }
    progress.finish_and_clear();

    let outcomes = targets::read(targets::TARGETS, &rows);
    json_lines.extend(outcomes.iter().map(|o| o.json()));
    if opts.json {
        for o in &outcomes {
            writeln!(out, "{}", o.json()).map_err(io)?;
        }
    }

    let page = html::write(opts.html.clone(), &run, &rows, &outcomes);
    let recorded = if opts.record {
        Some(record::write(&run, &json_lines).map_err(|e| ReportError::new(format!("--record: {e}")))?)
    } else {
        None
    };
    if !opts.json {
        write!(out, "{}", text(&rows, &outcomes, &ctx)).map_err(io)?;
        match &page {
            Ok(path) => writeln!(out, "\nHTML report with charts: {}", path.display()).map_err(io)?,
            Err(e) => writeln!(out, "\nHTML report: not written ({e})").map_err(io)?,
        }
        if let Some(path) = &recorded {
            writeln!(out, "recorded: {}", path.display()).map_err(io)?;
        }
    } else if let Err(e) = &page {
        eprintln!("report: the HTML page was not written: {e}");
    }
    out.flush().map_err(io)
}

/// The text after the first line: the summary, the targets, the rows, the other figures, the
/// notes and the legend.
fn text(rows: &[Row], outcomes: &[targets::Outcome], ctx: &Context) -> String {
    let mut t = String::new();
    let mut line = |s: &str| {
        t.push_str(s);
        t.push('\n');
    };
    let headlines = FAMILIES.iter().flat_map(|f| f.headlines.iter());
    line("");
    line("summary: each kernel's headline row on each SIMD ISA; the worst error over all its rows, as a");
    line("fraction of the documented bound; ✓/✗ against each target (figures and targets below)");
    for l in summary::table(headlines, rows, outcomes) {
        line(&l);
    }

    let groups = targets::groups(outcomes);
    let with_goal = |g: &&Vec<&targets::Outcome>| g[0].target.goal != targets::Goal::None;
    line("");
    line("targets (ratios within this run):");
    for g in groups.iter().filter(with_goal) {
        if let Some(l) = targets::line(g) {
            line(&format!("  {l}"));
        }
    }
    let missing = targets::unmeasured(outcomes);
    if !missing.is_empty() {
        line(&format!("  not measured in this run: {}", missing.join("; ")));
    }

    line("");
    line(&output::table_header());
    for r in rows.iter().filter(|r| r.kernel != threads::KERNEL) {
        line(&output::table_line(r));
    }

    let split: Vec<&Row> = rows.iter().filter(|r| r.kernel == threads::KERNEL).collect();
    if !split.is_empty() {
        line("");
        line("threads: calls split over a pool of N threads against the same calls on one thread, interleaved (same bits checked):");
        for l in threads::table(&split) {
            line(&format!("  {l}"));
        }
    }

    let passes: Vec<String> = rows.iter().filter_map(steps_line).collect();
    if !passes.is_empty() {
        line("");
        line("whole passes: their rate and the share of time per step (a few profiled passes after the timing):");
        for p in passes {
            line(&format!("  {p}"));
        }
    }

    let figures: Vec<String> = groups
        .iter()
        .filter(|g| !with_goal(g))
        .filter_map(|g| targets::line(g))
        .collect();
    if !figures.is_empty() {
        line("");
        line("other figures (no target):");
        for f in figures {
            line(&format!("  {f}"));
        }
    }

    let broken: Vec<String> = rows
        .iter()
        .filter(|r| r.within_bound == Some(false))
        .map(|r| format!("{} {} {} {}", r.kernel, r.isa, r.dtype, r.shape))
        .collect();
    if !broken.is_empty() {
        line("");
        line(&format!(
            "ERROR BOUND BROKEN (err/bnd > 1, marked !): {}. The kernel's output is outside its documented bound \
             against the oracle: a bug to report.",
            broken.join(", ")
        ));
    }
    let mut above: Vec<&str> = Vec::new();
    for r in rows {
        if let (Some(name), Some(q)) = (&r.roofline, r.roofline_ratio) {
            if q > ABOVE_ROOFLINE && !above.contains(&name.as_str()) {
                above.push(name);
            }
        }
    }
    if !above.is_empty() {
        line("");
        line(&format!(
            "note: some rows run faster than their roofline (xroof > {ABOVE_ROOFLINE}): {}. That \"roofline\" is \
             then not a limit in this run (a slow reference implementation, or noise); read those ratios with care.",
            above.join(", ")
        ));
    }
    line("");
    t.push_str(&legend(ctx));
    t
}

/// A row's rate and step shares, where it has them: `encoder avx512 1x128: 70.1 sentences/s;
/// linear 81%, attention 12%, norms 6%, activation 0%`.
fn steps_line(r: &Row) -> Option<String> {
    let (rate, name) = r.units_per_s()?;
    let shares: Vec<String> = r
        .steps
        .iter()
        .map(|(step, share)| format!("{step} {:.0}%", share * 100.0))
        .collect();
    Some(format!(
        "{} {} {}: {rate:.1} {name}/s; {}",
        r.kernel,
        r.isa,
        r.shape,
        shares.join(", ")
    ))
}

/// The short legend under the rows.
fn legend(ctx: &Context) -> String {
    format!(
        "\
legend:
  err/bnd     the worst error against the f64 oracle (`reference`) as a fraction of the kernel's documented
              bound: <= 1 holds it, ! breaks it (f16/bf16: the one rounding to the type is free). Plain Rust
              rows show theirs for comparison; they are not held to it. \"hard\": inputs hard on purpose.
  xscalar, xplain, xunfused   speed-up over the scalar path, plain Rust (f32::exp loops, two-pass norms),
              the unfused composition (attention, GAU: the gemm crate around this crate's pieces; linear: the
              gemm crate, then a bias loop and gelu; add_ln_h: a plain add loop, then layer_norm; the gemm
              crate on its kernels for the row's ISA); medians of per-round ratios, interleaved in one run.
  roofline    what the row is held against, measured in the same run: a copy of the same bytes (beyond L2,
              and for norms), the bare vectorized exp of the ISA (softmax-like rows in cache), the FMA peak
              (attention, GAU, linear); xroof = roofline time / kernel time (1.0 = at the roofline).
  linear      shape MxK→N: M rows through a K→N layer with bias, `gelu` where it has one, `bf16w` with
              bf16 weights; weights packed once; `streamed`: each call's weights come from memory (a cycle
              of copies twice the LLC), as a small batch through a model larger than the LLC.
  encoder     shape BxL: a 6-layer Post-LN encoder of all-MiniLM-L6-v2's sizes with random weights over B
              sequences of L tokens; xunfused against the same model from the gemm crate and separate bias,
              GELU, add and layer-norm passes (encoder_gemm rows).
  GB/s        bytes an ideal kernel moves (each input read once, each output written once); time = median
              per call; iqr = interquartile range / median (noise).
  timing      {rounds} rounds of ~{sample:.0} ms batches per contender, order shuffled per round (attention
              B=1 H=8 D=64; L=2048 at most {long} rounds). Machines like this one drift 2-3x between time
              windows: compare ratios within one run, not figures across runs.
  buffers     {placement}.
",
        rounds = ctx.timing.rounds,
        sample = ctx.timing.sample_ns / 1e6,
        long = attention::LONG_ROUNDS.min(ctx.timing.rounds),
        placement = buffers::describe(ctx.out_offset),
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
        let Ok(Command::Run(o)) = args("--quick --json --record --kernel softmax,exp --isa=avx2 --rounds 3") else {
            panic!("should parse");
        };
        assert!(o.scope == Scope::Quick && o.json && o.record);
        assert_eq!(o.kernels, Some(vec!["softmax".to_string(), "exp".to_string()]));
        assert_eq!(o.isas, Some(vec!["avx2".to_string()]));
        assert_eq!(o.rounds, Some(3));
        assert_eq!(args("--help"), Ok(Command::Help));
        assert!(args("--bogus").is_err());
        assert!(args("--rounds 0").is_err());
        assert!(args("--threads 0").is_err());
        assert!(args("--threads two").is_err());
        let Ok(Command::Run(o)) = args("--threads=3") else {
            panic!("should parse");
        };
        assert_eq!(o.threads, vec![3]);
        let Ok(Command::Run(o)) = args("--threads 16,4,8,4") else {
            panic!("should parse");
        };
        assert_eq!(o.threads, vec![4, 8, 16]);
        assert!(args("--threads 4,0").is_err());
        assert!(args("--threads 4,").is_err());
        assert!(args("--kernel").is_err());
        assert!(args("--quick --full").is_err());
        let Ok(Command::Run(o)) = args("--full --html /tmp/x") else {
            panic!("should parse");
        };
        assert_eq!((o.scope, o.html), (Scope::Full, Some(PathBuf::from("/tmp/x"))));
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
