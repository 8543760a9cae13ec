//! The run's identity (machine, ISAs, date, scope), and its record: the JSON lines of a run
//! kept as data in `benches/records/<machine>-<date>.jsonl`, where docs cite measured figures
//! by file name.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use super::case::Context;
use super::output::JsonObject;
use super::Scope;

/// What a run measured on: printed first, written first in JSON, named in the record's file.
pub struct Run {
    /// The CPU's model name.
    pub cpu: String,
    /// The x86 CPU's family and model numbers, where the system gives them.
    pub family_model: Option<(u32, u32)>,
    /// The level-2 cache in bytes, if the system says.
    pub l2: Option<usize>,
    /// The ISAs measured, best first.
    pub isas: Vec<String>,
    /// How much the run covers.
    pub scope: Scope,
    /// Seconds since the Unix epoch at the start.
    pub unix: u64,
    /// Rounds and batch length of the timing.
    pub rounds: usize,
    /// Batch length in milliseconds.
    pub batch_ms: f64,
    /// The kernels of `--kernel`, if the run is restricted to some.
    pub kernels: Option<Vec<String>>,
    /// The thread counts of the `threads` rows (`--threads`).
    pub threads: Vec<usize>,
}

impl Run {
    /// The run starting now in `ctx`.
    pub fn now(ctx: &Context, l2: Option<usize>, scope: Scope, kernels: Option<Vec<String>>) -> Run {
        Run {
            cpu: crate::roofline::cpu_name(),
            family_model: crate::roofline::cpu_family_model(),
            l2,
            isas: ctx.kernels.iter().rev().map(|k| k.isa().to_string()).collect(),
            scope,
            unix: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            rounds: ctx.timing.rounds,
            batch_ms: ctx.timing.sample_ns / 1e6,
            kernels,
            threads: ctx.threads.clone(),
        }
    }

    fn scope_name(&self) -> &'static str {
        match self.scope {
            Scope::Quick => "quick",
            Scope::Default => "default",
            Scope::Full => "full",
        }
    }

    /// The date of the run, `YYYY-MM-DD` (UTC).
    pub fn date(&self) -> String {
        let (y, m, d) = civil_date(self.unix);
        format!("{y:04}-{m:02}-{d:02}")
    }

    /// A short name of the machine: the CPU's model name, its family and model numbers, and
    /// the SIMD ISAs, e.g. `amd-epyc-f25m17-avx512-avx2`.
    pub fn machine(&self) -> String {
        let family_model = self.family_model.map(|(f, m)| format!("f{f}m{m}"));
        let simd = self.isas.iter().filter(|i| *i != "scalar");
        let words: Vec<&str> = family_model.iter().chain(simd).map(String::as_str).collect();
        slug(&self.cpu, &words)
    }

    /// The CPU's name, with its family and model numbers where known.
    fn cpu_described(&self) -> String {
        match self.family_model {
            Some((f, m)) => format!("{} (family {f}, model {m})", self.cpu),
            None => self.cpu.clone(),
        }
    }

    /// The first line of the text report.
    pub fn headline(&self) -> String {
        let l2 = match self.l2 {
            Some(b) => format!("L2 {} KiB", b >> 10),
            None => "L2 unknown (1 MiB assumed)".to_string(),
        };
        let scope = match self.scope {
            Scope::Quick => "--quick run (a few shapes)",
            Scope::Default => "default run (headline shapes; --full for the whole sweep)",
            Scope::Full => "--full run (the whole sweep)",
        };
        format!(
            "kernels report: {}; {l2}; ISAs {}; {scope}; {} {}x{:.0} ms rounds",
            self.cpu_described(),
            self.isas.join(", "),
            self.date(),
            self.rounds,
            self.batch_ms
        )
    }

    /// The run as one JSON object.
    pub fn json(&self) -> String {
        let mut o = JsonObject::default();
        o.str("kind", "run");
        o.str("machine", &self.machine());
        o.str("cpu", &self.cpu);
        o.num("cpu_family", self.family_model.map(|(f, _)| f64::from(f)));
        o.num("cpu_model", self.family_model.map(|(_, m)| f64::from(m)));
        o.num("l2_bytes", self.l2.map(|b| b as f64));
        o.raw(
            "isas",
            &format!(
                "[{}]",
                self.isas
                    .iter()
                    .map(|i| format!("\"{i}\""))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        );
        o.str("scope", self.scope_name());
        o.str("date", &self.date());
        o.num("unix_time", Some(self.unix as f64));
        o.num("rounds", Some(self.rounds as f64));
        o.num("batch_ms", Some(self.batch_ms));
        o.raw(
            "threads",
            &format!(
                "[{}]",
                self.threads.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
            ),
        );
        o.str("version", env!("CARGO_PKG_VERSION"));
        if let Some(k) = &self.kernels {
            o.raw(
                "kernels",
                &format!(
                    "[{}]",
                    k.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(",")
                ),
            );
        }
        o.finish()
    }
}

/// `cpu` and `isas` as a file name: lower case, runs of other characters as one `-`, the
/// vendor marks, "CPU", "Processor" and the clock dropped.
pub fn slug(cpu: &str, isas: &[&str]) -> String {
    let cpu = cpu.split('@').next().unwrap_or(cpu).to_lowercase();
    let cpu = cpu.replace("(r)", " ").replace("(tm)", " ");
    let words = cpu
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty() && !matches!(*w, "cpu" | "processor" | "core"))
        .chain(isas.iter().copied());
    words.collect::<Vec<_>>().join("-")
}

/// The UTC date `(year, month, day)` of `unix` seconds (Howard Hinnant's `civil_from_days`).
pub fn civil_date(unix: u64) -> (i64, u32, u32) {
    let z = (unix / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The folder of the records: `benches/records/` of this workspace.
pub fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("records")
}

/// The record's file name: `<machine>-<date>.jsonl`, or `<machine>-<date>-<kernels>.jsonl` for a
/// run restricted by `--kernel` (so that it does not replace the whole run of the same day).
pub fn file_name(run: &Run) -> String {
    match &run.kernels {
        Some(k) => format!("{}-{}-{}.jsonl", run.machine(), run.date(), k.join("-")),
        None => format!("{}-{}.jsonl", run.machine(), run.date()),
    }
}

/// Writes `lines` to `benches/records/` under [`file_name`] (replacing a record of the same
/// machine, day and kernels); returns the path.
pub fn write(run: &Run, lines: &[String]) -> std::io::Result<PathBuf> {
    let dir = folder();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(file_name(run));
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    for line in lines {
        writeln!(file, "{line}")?;
    }
    file.flush()?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_from_the_epoch() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(951_782_400), (2000, 2, 29));
        assert_eq!(civil_date(1_709_164_800), (2024, 2, 29));
        assert_eq!(civil_date(1_798_761_599), (2026, 12, 31));
    }

    #[test]
    fn runs_of_some_kernels_have_files_of_their_own() {
        let mut run = Run {
            cpu: "AMD EPYC".to_string(),
            family_model: None,
            l2: None,
            isas: vec!["avx512".to_string(), "scalar".to_string()],
            scope: Scope::Full,
            unix: 0,
            rounds: 1,
            batch_ms: 1.0,
            kernels: None,
            threads: vec![2],
        };
        assert_eq!(file_name(&run), "amd-epyc-avx512-1970-01-01.jsonl");
        run.kernels = Some(vec!["linear".to_string(), "gelu".to_string()]);
        assert_eq!(file_name(&run), "amd-epyc-avx512-1970-01-01-linear-gelu.jsonl");
        assert!(run.json().contains(r#""kernels":["linear","gelu"]"#), "{}", run.json());
        assert!(run.json().contains(r#""threads":[2]"#), "{}", run.json());
        run.family_model = Some((25, 17));
        assert_eq!(file_name(&run), "amd-epyc-f25m17-avx512-1970-01-01-linear-gelu.jsonl");
        assert!(
            run.json().contains(r#""cpu_family":25,"cpu_model":17"#),
            "{}",
            run.json()
        );
    }

    #[test]
    fn machine_names_are_short_slugs() {
        assert_eq!(slug("AMD EPYC", &["avx512", "avx2"]), "amd-epyc-avx512-avx2");
        assert_eq!(
            slug("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", &["avx512", "avx2"]),
            "intel-xeon-platinum-8375c-avx512-avx2"
        );
        assert_eq!(
            slug("AMD Ryzen 9 7950X 16-Core Processor", &["avx2"]),
            "amd-ryzen-9-7950x-16-avx2"
        );
    }
}
