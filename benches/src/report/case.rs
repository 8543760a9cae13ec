//! A case of the report (one kernel over one shape) and the driver that measures it.
//!
//! A case names its kernel and shape, makes its input, and says how to run the kernel on a
//! given ISA, the plain Rust version and the oracle. The driver does the rest, the same way for
//! every kernel: it places the buffers ([`crate::buffers::Pair`]), checks every path's output
//! against the oracle, times the plain version, every ISA's kernel and every ISA's roofline
//! interleaved over the same buffers, and turns the figures into [`Row`]s.

use std::hint::black_box;

use kernels::{Element, Isa, Kernels};

use super::accuracy::{errors, Errors};
use super::output::Row;
use super::timing::{self, Timing};
use super::ReportError;
use crate::buffers::Pair;
use crate::roofline::{self, Stores};
use crate::storage;

/// Runs the kernel of a case on one ISA: `(kernels, x, y)`.
pub type KernelFn = dyn Fn(Kernels, &[f32], &mut [f32]) -> Result<(), kernels::Error>;
/// Runs the plain Rust version of a case: `(x, y)`.
pub type PlainFn = dyn Fn(&[f32], &mut [f32]);
/// The exact result of a case for input `x`, from the `reference` crate.
pub type OracleFn = dyn Fn(&[f32]) -> Vec<f64>;
/// Widens a half-typed case's output buffer to its elements as f32.
pub type DecodeFn = dyn Fn(&[f32]) -> Vec<f32>;
/// The worst error of an output as a fraction of the kernel's documented bound, from the
/// input and output buffers (the `reference::fraction` function of the kernel): `(x, y)`.
pub type BoundFn = dyn Fn(&[f32], &[f32]) -> f64;
/// Measures a [`Custom`] case: its printed rows.
pub type MeasureFn = dyn Fn(&Context) -> Result<Vec<Row>, ReportError>;

/// Which roofline a case is held against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A memory-bound kernel that spends its time in `exp` when in cache (softmax): the copy of
    /// the same bytes when the working set exceeds L2, else the bare vectorized `exp` of the
    /// same ISA from `x` to `y` ([`Kernels::exp`]).
    CopyBeyondL2ElseExp,
    /// Always the copy of the same bytes.
    Copy,
    /// A compute-bound kernel with a FLOP count ([`Case::flops`]): the FMA peak of the same ISA
    /// ([`roofline::fma_peak`]), its fastest round's time scaled to the case's FLOPs (see
    /// `fma_ratio`).
    Fma,
}

/// A case with a driver of its own: a kernel whose operands do not fit one `x` and one `y`, or
/// whose oracle is too slow for the whole output (attention). Its `measure` times it on the
/// ISAs of the context and returns its printed rows, as `measure` does for a [`Case`].
pub struct Custom {
    /// The kernel's name as printed; also what `--kernel` matches.
    pub kernel: &'static str,
    /// The shape as printed.
    pub shape: String,
    /// Measures the case.
    pub measure: Box<MeasureFn>,
}

/// One kernel over one shape.
///
/// The data model is one f32 input buffer `x` and one f32 output buffer `y`; kernels with more
/// operands (weights, several inputs) capture the small ones in their closures, or pack several
/// inputs into `x` and split it in `run`.
pub struct Case {
    /// The kernel's name as printed (`softmax`); also what `--kernel` matches.
    pub kernel: &'static str,
    /// Element type, e.g. `f32`.
    pub dtype: &'static str,
    /// The shape as printed: `rows x n`, or a length.
    pub shape: String,
    /// Floats in `x`.
    pub x_len: usize,
    /// Floats in `y`.
    pub y_len: usize,
    /// Elements produced per call (for Gelem/s).
    pub elements: usize,
    /// Whether the kernel honours [`kernels::Stores`]: where [`Kernels::streams`] says it
    /// writes around the caches at this size, it is held against a copy that does too.
    pub streams: bool,
    /// FLOPs per call, for kernels where the count means something (GEMM-like ones).
    pub flops: Option<f64>,
    /// The roofline the case is held against.
    pub rule: Rule,
    /// Makes the input `x` (`x_len` floats).
    pub input: Box<dyn Fn() -> Vec<f32>>,
    /// The kernel on a given ISA.
    pub run: Box<KernelFn>,
    /// The plain Rust version.
    pub plain: Box<PlainFn>,
    /// The oracle (`y_len` values; the output's elements for a half-typed case).
    pub oracle: Box<OracleFn>,
    /// The output's elements as f32, for the accuracy check: `None` where `y` holds the f32
    /// elements the oracle gives, else those elements (widened from a half type, or the first
    /// of several outputs).
    pub decode: Option<Box<DecodeFn>>,
    /// The output's worst error as a fraction of the documented bound (see
    /// [`Case::with_bound`]); `None` prints "-".
    pub bound: Option<Box<BoundFn>>,
    /// The unfused composition a user would write from this crate's parts, on a given ISA
    /// (its name in [`Row::vs`], and the call): timed beside the kernel, its output held to the
    /// same bound (a wrong baseline makes every ratio wrong).
    pub unfused: Option<(&'static str, Box<KernelFn>)>,
    /// Where the input is hard on purpose, what makes it so (printed with the row).
    pub hard: Option<&'static str>,
}

impl Case {
    /// A kernel from `len` floats to `len` floats (softmax, norms, exp): an ideal kernel reads
    /// `x` and writes `y` once, `8·len` bytes for f32.
    pub fn elementwise(
        kernel: &'static str,
        shape: String,
        len: usize,
        input: impl Fn() -> Vec<f32> + 'static,
        run: impl Fn(Kernels, &[f32], &mut [f32]) -> Result<(), kernels::Error> + 'static,
        plain: impl Fn(&[f32], &mut [f32]) + 'static,
        oracle: impl Fn(&[f32]) -> Vec<f64> + 'static,
    ) -> Case {
        Case {
            kernel,
            dtype: "f32",
            shape,
            x_len: len,
            y_len: len,
            elements: len,
            streams: false,
            flops: None,
            rule: Rule::CopyBeyondL2ElseExp,
            input: Box::new(input),
            run: Box::new(run),
            plain: Box::new(plain),
            oracle: Box::new(oracle),
            decode: None,
            bound: None,
            unfused: None,
            hard: None,
        }
    }

    /// The case with the fraction of the bound of its outputs: `bound(x, y)` on the input and
    /// output buffers, usually a `reference::fraction` function on views of them.
    pub fn with_bound(self, bound: impl Fn(&[f32], &[f32]) -> f64 + 'static) -> Case {
        Case {
            bound: Some(Box::new(bound)),
            ..self
        }
    }

    /// [`Case::elementwise`] over tensors stored as `E` (f16, bf16): `x` and `y` hold `len`
    /// elements of `E` in [`storage`] slots, so bytes and the copy roofline are the narrower
    /// type's. `input`, `plain` and `oracle` are the f32 case's: the input is rounded to `E`
    /// once, the plain version is what a user would write (widen, the f32 plain code, round),
    /// and the oracle sees the widened input. Held against the copy of the same bytes.
    pub fn elementwise_as<E: Element>(
        kernel: &'static str,
        shape: String,
        len: usize,
        input: impl Fn() -> Vec<f32> + 'static,
        run: impl Fn(Kernels, &[E], &mut [E]) -> Result<(), kernels::Error> + 'static,
        plain: impl Fn(&[f32], &mut [f32]) + 'static,
        oracle: impl Fn(&[f32]) -> Vec<f64> + 'static,
    ) -> Case {
        Case::stored_as::<E>(kernel, shape, [len, len, len], input, run, plain, oracle)
    }

    /// [`Case::elementwise_as`] with `x` of `x_elems` elements (several inputs packed, as
    /// `[x | r]`), `y` of `y_elems` (several outputs, as `[y | h]`), and `out` elements
    /// produced and checked: the first `out` of `y`. `lens = [x_elems, y_elems, out]`.
    pub fn stored_as<E: Element>(
        kernel: &'static str,
        shape: String,
        lens: [usize; 3],
        input: impl Fn() -> Vec<f32> + 'static,
        run: impl Fn(Kernels, &[E], &mut [E]) -> Result<(), kernels::Error> + 'static,
        plain: impl Fn(&[f32], &mut [f32]) + 'static,
        oracle: impl Fn(&[f32]) -> Vec<f64> + 'static,
    ) -> Case {
        let [xn, yn, out] = lens;
        // f32 needs no decoding and no conversion around its plain version: the case is then
        // exactly the f32 one (`view::<f32>` is the identity).
        let is_f32 = E::NAME == f32::NAME;
        Case {
            dtype: E::NAME,
            x_len: storage::slots::<E>(xn),
            y_len: storage::slots::<E>(yn),
            elements: out,
            rule: Rule::Copy,
            // The first `out` elements of `y` are checked (f32 too, where `y` holds more).
            decode: (!is_f32 || out < yn)
                .then(|| Box::new(move |y: &[f32]| storage::unpack::<E>(y, out)) as Box<DecodeFn>),
            ..Case::elementwise(
                kernel,
                shape,
                out,
                move || storage::pack::<E>(&input()),
                move |k, x, y| run(k, storage::view::<E>(x, xn), storage::view_mut::<E>(y, yn)),
                move |x, y| {
                    if is_f32 {
                        return plain(x, y);
                    }
                    let wide = storage::unpack::<E>(x, xn);
                    let mut result = vec![0.0f32; yn];
                    plain(&wide, &mut result);
                    for (d, &v) in storage::view_mut::<E>(y, yn).iter_mut().zip(&result) {
                        *d = E::from_f32(v);
                    }
                },
                move |x| {
                    if is_f32 {
                        oracle(x)
                    } else {
                        oracle(&storage::unpack::<E>(x, xn))
                    }
                },
            )
        }
    }

    /// Bytes an ideal kernel reads and writes per call: `x` once and `y` once.
    pub fn bytes(&self) -> usize {
        (self.x_len + self.y_len) * std::mem::size_of::<f32>()
    }
}

/// What the driver needs to know about the run.
pub struct Context {
    /// Every ISA the cases run on: the printed ones and the scalar path (for `vs_scalar`).
    pub kernels: Vec<Kernels>,
    /// The ISAs whose rows are printed.
    pub printed: Vec<Isa>,
    /// Whether the plain Rust row is printed.
    pub print_plain: bool,
    /// Working sets beyond this many bytes are held against the copy roofline.
    pub l2_bytes: usize,
    /// Output placement, see [`crate::buffers`].
    pub out_offset: usize,
    /// How long to measure.
    pub timing: Timing,
    /// The thread counts of the `threads` rows, ascending.
    pub threads: Vec<usize>,
}

/// One thing timed on a case's buffers.
#[derive(Debug, Clone, Copy)]
enum Contender {
    Plain,
    Kernel(Kernels),
    Unfused(Kernels),
    Copy(Isa, Stores),
    Exp(Kernels),
    Fma(Isa),
}

impl Contender {
    fn name(&self) -> String {
        match self {
            Contender::Plain => "plain Rust".to_string(),
            Contender::Kernel(k) => format!("kernel on {}", k.isa()),
            Contender::Unfused(k) => format!("unfused composition on {}", k.isa()),
            Contender::Copy(isa, stores) => roofline::copy_name(*isa, *stores),
            Contender::Exp(k) => format!("exp({})", k.isa()),
            Contender::Fma(isa) => roofline::fma_name(*isa),
        }
    }
}

/// Runs `c` once on the case's buffers, inputs and outputs passed through `black_box`.
fn run(case: &Case, c: Contender, pair: &mut Pair) -> Result<(), String> {
    let (x, y) = pair.io();
    let (x, y) = (black_box(x), black_box(y));
    match c {
        Contender::Plain => (case.plain)(x, y),
        Contender::Kernel(k) => (case.run)(k, x, y).map_err(|e| e.to_string())?,
        Contender::Unfused(k) => {
            let (_, unfused) = case.unfused.as_ref().ok_or("the case has no unfused composition")?;
            unfused(k, x, y).map_err(|e| e.to_string())?
        }
        Contender::Copy(isa, stores) => {
            let m = x.len().min(y.len());
            if !roofline::copy(isa, stores, &x[..m], &mut y[..m]) {
                return Err(format!("no {} for {isa}", roofline::copy_name(isa, stores)));
            }
        }
        Contender::Exp(k) => k.exp(x, y).map_err(|e| e.to_string())?,
        Contender::Fma(isa) => {
            black_box(roofline::fma_peak(isa, black_box(roofline::FMA_ITERS)));
        }
    }
    black_box(y);
    Ok(())
}

/// The roofline a case is held against, once its rule is decided for its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Roof {
    Copy,
    Exp,
    Fma,
}

/// The fraction of the FMA peak a kernel reaches: `scale` = the kernel's FLOPs per call ÷ the
/// peak loop's, `peak_ns` the peak loop's fastest round, `kernel_ns` the kernel's median.
///
/// The peak is a constant of the hardware: a slower round of its short loop is interference
/// (on these shared machines a preemption can double a 5 ms batch), so its fastest round is
/// the estimate, not a median of per-round ratios. Interference then lowers the fraction (the
/// kernel's median pays for it), never raises it past the truth.
pub fn fma_ratio(peak_ns: f64, kernel_ns: f64, scale: f64) -> f64 {
    peak_ns * scale / kernel_ns
}

/// FLOPs of one call of the FMA-peak loop of `isa` as the report times it.
pub fn fma_call_flops(isa: Isa) -> f64 {
    (roofline::FMA_ITERS * roofline::fma_flops_per_iter(isa)) as f64
}

/// Measures `case` on every ISA of `ctx` and returns its printed rows.
pub fn measure(case: &Case, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let what = format!("{} {}", case.kernel, case.shape);
    let fail = |msg: String| ReportError::new(format!("{what}: {msg}"));

    let mut pair = Pair::new(case.x_len, case.y_len, ctx.out_offset);
    let input = (case.input)();
    if input.len() != case.x_len {
        return Err(fail(format!(
            "the input has {} floats, expected {}",
            input.len(),
            case.x_len
        )));
    }
    pair.x_mut().copy_from_slice(&input);
    let exact = (case.oracle)(pair.x());
    // A half-typed case's oracle gives one value per element, not per f32 slot.
    let want = if case.decode.is_some() {
        case.elements
    } else {
        case.y_len
    };
    if exact.len() != want {
        return Err(fail(format!("the oracle gave {} values, expected {want}", exact.len())));
    }

    // The copy roofline copies min(x, y) floats; its time is scaled to the case's bytes. The
    // FMA peak runs a fixed number of FLOPs; its time is scaled to the case's FLOPs.
    let copied = case.x_len.min(case.y_len);
    let roof = match case.rule {
        Rule::Copy => Roof::Copy,
        Rule::CopyBeyondL2ElseExp if case.bytes() > ctx.l2_bytes || case.x_len != case.y_len => Roof::Copy,
        Rule::CopyBeyondL2ElseExp => Roof::Exp,
        Rule::Fma => Roof::Fma,
    };
    let roof_scale = |isa: Isa| match roof {
        Roof::Copy if copied > 0 => (case.x_len + case.y_len) as f64 / (2 * copied) as f64,
        Roof::Copy | Roof::Exp => 1.0,
        Roof::Fma => case.flops.unwrap_or(f64::NAN) / fma_call_flops(isa),
    };
    if roof == Roof::Fma && case.flops.is_none() {
        return Err(fail("Rule::Fma needs a FLOP count".to_string()));
    }

    // The copy stores as the kernel does: streaming where it streams its output.
    let copy_stores = |k: Kernels| {
        if case.streams && k.streams(case.bytes()) {
            Stores::Streaming
        } else {
            Stores::Ordinary
        }
    };

    let n_isa = ctx.kernels.len();
    let mut contenders = vec![Contender::Plain];
    contenders.extend(ctx.kernels.iter().map(|&k| Contender::Kernel(k)));
    contenders.extend(ctx.kernels.iter().map(|&k| match roof {
        Roof::Copy => Contender::Copy(k.isa(), copy_stores(k)),
        Roof::Exp => Contender::Exp(k),
        Roof::Fma => Contender::Fma(k.isa()),
    }));
    // The unfused composition on the printed SIMD ISAs (after the rooflines: indices above
    // stay as they were).
    if case.unfused.is_some() {
        contenders.extend(
            ctx.kernels
                .iter()
                .filter(|k| k.isa() != Isa::Scalar && ctx.printed.contains(&k.isa()))
                .map(|&k| Contender::Unfused(k)),
        );
    }

    // Run every contender once: errors surface here, with a message, not inside the timing;
    // the outputs of the kernels and plain Rust are checked against the oracle and the bound,
    // the unfused compositions against the bound.
    let mut errs: Vec<Option<Errors>> = vec![None; contenders.len()];
    let mut fractions: Vec<Option<f64>> = vec![None; contenders.len()];
    for (i, &c) in contenders.iter().enumerate() {
        run(case, c, &mut pair).map_err(|e| fail(format!("{}: {e}", c.name())))?;
        if matches!(c, Contender::Plain | Contender::Kernel(_) | Contender::Unfused(_)) {
            fractions[i] = case.bound.as_ref().map(|bound| bound(pair.x(), pair.y()));
        }
        if matches!(c, Contender::Plain | Contender::Kernel(_)) {
            errs[i] = Some(match &case.decode {
                None => errors(pair.y(), &exact),
                Some(decode) => errors(&decode(pair.y()), &exact),
            });
        }
        if let (Contender::Unfused(_), Some(f)) = (c, fractions[i]) {
            if f.is_nan() || f > 1.0 {
                return Err(fail(format!(
                    "the {} is outside the kernel's bound ({f:.3} of it): a bug in the report",
                    c.name()
                )));
            }
        }
    }

    let samples = timing::interleaved(contenders.len(), &ctx.timing, |i| {
        // Checked above; a failure here cannot differ from the first call's.
        let _ = run(case, contenders[i], &mut pair);
    });

    let scalar = 1 + ctx
        .kernels
        .iter()
        .position(|k| k.isa() == Isa::Scalar)
        .ok_or_else(|| fail("the scalar path is not among the measured ISAs".to_string()))?;
    let roof_name = |k: Kernels| match roof {
        Roof::Copy => roofline::copy_name(k.isa(), copy_stores(k)),
        Roof::Exp => format!("exp({})", k.isa()),
        Roof::Fma => roofline::fma_name(k.isa()),
    };
    let row = |i: usize, isa: String, roof_at: usize, roof_kernels: Kernels| Row {
        kernel: case.kernel.to_string(),
        isa,
        dtype: case.dtype.to_string(),
        shape: case.shape.clone(),
        bytes: Some(case.bytes() as f64),
        elements: Some(case.elements as f64),
        flops: case.flops,
        ns_per_iter: samples.median(i),
        // f32 ulps say nothing of a half-typed output: only its relative error is printed.
        max_ulp: errs[i].filter(|_| case.dtype == "f32").map(|e| e.max_ulp),
        max_rel_err: errs[i].map(|e| e.max_rel),
        bound_fraction: fractions[i],
        // Plain Rust is not held to the kernel's bound: its fraction is for comparison.
        within_bound: fractions[i].filter(|_| i > 0).map(|f| f <= 1.0),
        input: case.hard.map(str::to_string),
        vs_scalar: Some(samples.speedup(i, scalar)),
        vs_plain: Some(samples.speedup(i, 0)),
        vs_isa: ctx
            .kernels
            .iter()
            .enumerate()
            .filter(|&(j, _)| 1 + j != i)
            .map(|(j, k)| (k.isa().to_string(), samples.speedup(i, 1 + j)))
            .collect(),
        vs: case
            .unfused
            .as_ref()
            .and_then(|(name, _)| {
                let kernel = contenders.get(i).copied()?;
                let Contender::Kernel(k) = kernel else { return None };
                let at = contenders
                    .iter()
                    .position(|c| matches!(c, Contender::Unfused(u) if u.isa() == k.isa()))?;
                Some(vec![(name.to_string(), samples.speedup(i, at))])
            })
            .unwrap_or_default(),
        roofline: Some(roof_name(roof_kernels)),
        roofline_ratio: Some(if roof == Roof::Fma {
            fma_ratio(samples.min(roof_at), samples.median(i), roof_scale(roof_kernels.isa()))
        } else {
            samples.speedup(i, roof_at) * roof_scale(roof_kernels.isa())
        }),
        roofline_ns_per_iter: Some(if roof == Roof::Fma {
            samples.min(roof_at) * roof_scale(roof_kernels.isa())
        } else {
            samples.median(roof_at) * roof_scale(roof_kernels.isa())
        }),
        rel_iqr: samples.rel_iqr(i),
        rounds: samples.rounds(),
        ..Row::default()
    };

    let mut rows = Vec::new();
    if ctx.print_plain {
        // Plain Rust is compiled for the baseline ISA: held against the scalar ISA's roofline.
        rows.push(row(0, "plain".to_string(), scalar + n_isa, ctx.kernels[scalar - 1]));
    }
    for (j, &k) in ctx.kernels.iter().enumerate() {
        if ctx.printed.contains(&k.isa()) {
            rows.push(row(1 + j, k.isa().to_string(), 1 + n_isa + j, k));
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        let isas = kernels::available_isas();
        Context {
            kernels: isas
                .iter()
                .map(|&isa| Kernels::for_isa(isa).expect("available"))
                .collect(),
            printed: isas,
            print_plain: true,
            l2_bytes: 1 << 20,
            out_offset: crate::buffers::DEFAULT_OUT_OFFSET,
            threads: vec![2],
            timing: Timing {
                rounds: 1,
                sample_ns: 1e4,
            },
        }
    }

    #[test]
    fn fma_rule_holds_rows_against_the_fma_peak() {
        let len = 64;
        let case = Case {
            rule: Rule::Fma,
            flops: Some(1e6),
            ..Case::elementwise(
                "exp",
                len.to_string(),
                len,
                move || vec![0.5; len],
                |k: Kernels, x, y| k.exp(x, y),
                crate::plain::exp,
                reference::exp,
            )
        };
        let ctx = context();
        let rows = measure(&case, &ctx).expect("measures");
        assert_eq!(rows.len(), ctx.kernels.len() + 1);
        for r in &rows {
            let name = r.roofline.as_deref().expect("a roofline");
            assert!(name.starts_with("fma peak("), "{name}");
            assert!(r.roofline_ratio.is_some_and(|q| q.is_finite() && q > 0.0), "{r:?}");
        }
        let no_flops = Case { flops: None, ..case };
        assert!(measure(&no_flops, &ctx).is_err());
    }
}
