//! The rows of the report, printed as an aligned table or as JSON lines.

use std::fmt::Write as _;

/// One line of the report: a kernel on one ISA and shape, or a machine limit.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// `softmax`, `exp`, … or `roofline` for the machine's limits.
    pub kernel: String,
    /// `scalar`, `avx2`, `avx512`, `neon`, or `plain` for the plain Rust baseline.
    pub isa: String,
    /// Element type of the data, e.g. `f32`.
    pub dtype: String,
    /// `rows x n`, a length, or what a roofline row measures.
    pub shape: String,
    /// Bytes an ideal kernel reads and writes per call.
    pub bytes: Option<f64>,
    /// Elements produced per call.
    pub elements: Option<f64>,
    /// Floating-point operations per call, where they mean something.
    pub flops: Option<f64>,
    /// Median time of one call.
    pub ns_per_iter: f64,
    /// Where the FLOP count leaves out skipped work (causal attention): the FLOPs counted as if
    /// dense, the convention of PyTorch's figures.
    pub flops_dense: Option<f64>,
    /// Max error in ulps against the oracle.
    pub max_ulp: Option<u64>,
    /// Max relative error against the oracle.
    pub max_rel_err: Option<f64>,
    /// Whether the checked outputs are within the kernel's documented error bound (where the
    /// row checks one).
    pub within_bound: Option<bool>,
    /// Speedup over the scalar path of the same kernel.
    pub vs_scalar: Option<f64>,
    /// Speedup over the plain Rust version.
    pub vs_plain: Option<f64>,
    /// Speedup over the same kernel on each other measured ISA (median of per-round ratios).
    pub vs_isa: Vec<(String, f64)>,
    /// Speedup over other named baselines of the same run: `gemm` and `matrixmultiply` (the
    /// unfused attention compositions), `attention plain` (the same ISA's kernel without the
    /// row's options: causal, padding, P/S).
    pub vs: Vec<(String, f64)>,
    /// What the row is held against, e.g. `copy(avx512, ordinary stores)` or `exp(avx512)`.
    pub roofline: Option<String>,
    /// The roofline's time ÷ the kernel's time (1.0 = at the roofline).
    pub roofline_ratio: Option<f64>,
    /// The roofline's median time for the same work.
    pub roofline_ns_per_iter: Option<f64>,
    /// For roofline rows: how the limit was measured.
    pub method: Option<String>,
    /// Interquartile range of the kernel's times relative to the median (noise).
    pub rel_iqr: f64,
    /// Rounds measured.
    pub rounds: usize,
}

impl Row {
    fn per_ns(&self, v: Option<f64>) -> Option<f64> {
        v.map(|v| v / self.ns_per_iter)
    }

    /// Bytes per nanosecond = GB/s.
    pub fn gb_per_s(&self) -> Option<f64> {
        self.per_ns(self.bytes)
    }

    /// Elements per nanosecond = Gelem/s.
    pub fn gelem_per_s(&self) -> Option<f64> {
        self.per_ns(self.elements)
    }

    /// FLOPs per nanosecond = GFLOP/s.
    pub fn gflop_per_s(&self) -> Option<f64> {
        self.per_ns(self.flops)
    }

    /// GFLOP/s with the FLOPs counted as if dense ([`Row::flops_dense`]).
    pub fn gflop_per_s_dense(&self) -> Option<f64> {
        self.per_ns(self.flops_dense)
    }

    /// The speedup over the baseline named `name` in [`Row::vs`].
    pub fn vs(&self, name: &str) -> Option<f64> {
        self.vs.iter().find(|(n, _)| n == name).map(|&(_, q)| q)
    }

    /// The row as one JSON object on one line.
    pub fn json(&self) -> String {
        let mut o = JsonObject::default();
        o.str("kernel", &self.kernel);
        o.str("isa", &self.isa);
        o.str("dtype", &self.dtype);
        o.str("shape", &self.shape);
        o.num("bytes", self.bytes);
        o.num("elements", self.elements);
        o.num("ns_per_iter", Some(self.ns_per_iter));
        o.num("gb_per_s", self.gb_per_s());
        o.num("gelem_per_s", self.gelem_per_s());
        o.num("gflop_per_s", self.gflop_per_s());
        o.num("gflop_per_s_dense", self.gflop_per_s_dense());
        o.num("max_ulp", self.max_ulp.map(|u| u as f64));
        o.num("max_rel_err", self.max_rel_err);
        o.opt_bool("within_bound", self.within_bound);
        o.num("vs_scalar", self.vs_scalar);
        o.num("vs_plain", self.vs_plain);
        o.num("vs_gemm", self.vs("gemm"));
        o.num("vs_matrixmultiply", self.vs("matrixmultiply"));
        o.map("vs_isa", &self.vs_isa);
        o.map("vs", &self.vs);
        o.opt_str("roofline", self.roofline.as_deref());
        o.num("roofline_ratio", self.roofline_ratio);
        o.num("roofline_ns_per_iter", self.roofline_ns_per_iter);
        o.opt_str("method", self.method.as_deref());
        o.num("rel_iqr", Some(self.rel_iqr));
        o.num("rounds", Some(self.rounds as f64));
        o.finish()
    }
}

/// A JSON object written by hand: strings escaped, non-finite and absent numbers as `null`.
#[derive(Default)]
struct JsonObject {
    out: String,
}

impl JsonObject {
    fn key(&mut self, key: &str) {
        self.out.push(if self.out.is_empty() { '{' } else { ',' });
        push_json_string(&mut self.out, key);
        self.out.push(':');
    }

    fn str(&mut self, key: &str, v: &str) {
        self.key(key);
        push_json_string(&mut self.out, v);
    }

    fn opt_str(&mut self, key: &str, v: Option<&str>) {
        match v {
            Some(v) => self.str(key, v),
            None => {
                self.key(key);
                self.out.push_str("null");
            }
        }
    }

    fn opt_bool(&mut self, key: &str, v: Option<bool>) {
        self.key(key);
        self.out.push_str(match v {
            Some(true) => "true",
            Some(false) => "false",
            None => "null",
        });
    }

    fn num(&mut self, key: &str, v: Option<f64>) {
        self.key(key);
        match v {
            // Integers print without a fraction; others with enough digits to round-trip.
            Some(v) if v.is_finite() && v == v.trunc() && v.abs() < 1e15 => {
                let _ = write!(self.out, "{}", v as i64);
            }
            Some(v) if v.is_finite() => {
                let _ = write!(self.out, "{v:e}");
            }
            _ => self.out.push_str("null"),
        }
    }

    fn map(&mut self, key: &str, entries: &[(String, f64)]) {
        let mut inner = JsonObject::default();
        for (k, v) in entries {
            inner.num(k, Some(*v));
        }
        self.key(key);
        self.out.push_str(&inner.finish());
    }

    fn finish(mut self) -> String {
        if self.out.is_empty() {
            self.out.push('{');
        }
        self.out.push('}');
        self.out
    }
}

fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The table's columns: title, width, right-aligned.
const COLUMNS: [(&str, usize, bool); 17] = [
    ("kernel", 11, false),
    ("isa", 6, false),
    ("type", 4, false),
    ("shape", 22, false),
    ("GB/s", 7, true),
    ("Gelem/s", 7, true),
    ("GFLOP/s", 7, true),
    ("time", 8, true),
    ("max_ulp", 7, true),
    ("max_rel", 7, true),
    ("xscalar", 7, true),
    ("xplain", 6, true),
    ("xgemm", 5, true),
    ("xmm", 5, true),
    ("roofline", 30, false),
    ("xroof", 5, true),
    ("iqr", 4, true),
];

fn line(cells: &[String]) -> String {
    let mut s = String::new();
    for (cell, &(_, width, right)) in cells.iter().zip(&COLUMNS) {
        if right {
            let _ = write!(s, "{cell:>width$}  ");
        } else {
            let _ = write!(s, "{cell:<width$}  ");
        }
    }
    s.trim_end().to_string()
}

/// The column titles and a rule under them.
pub fn table_header() -> String {
    let titles: Vec<String> = COLUMNS.iter().map(|c| c.0.to_string()).collect();
    let head = line(&titles);
    let rule = "-".repeat(head.len());
    format!("{head}\n{rule}")
}

/// The row as a line of the table.
pub fn table_line(r: &Row) -> String {
    let f = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let ulp = match r.max_ulp {
        None => "-".to_string(),
        Some(u64::MAX) => "NaN!".to_string(),
        Some(u) if u >= 10_000_000 => format!("{u:.1e}"),
        Some(u) => u.to_string(),
    };
    let mut rel = r.max_rel_err.map_or("-".to_string(), |e| {
        if e == 0.0 {
            "0".to_string()
        } else {
            format!("{e:.0e}")
        }
    });
    if r.within_bound == Some(false) {
        rel.push('!');
    }
    let roofline = match (&r.roofline, &r.method) {
        (Some(name), _) => name.clone(),
        (None, Some(method)) => format!("[{method}]"),
        (None, None) => "-".to_string(),
    };
    line(&[
        r.kernel.clone(),
        r.isa.clone(),
        r.dtype.clone(),
        r.shape.clone(),
        f(r.gb_per_s(), 1),
        f(r.gelem_per_s(), 3),
        f(r.gflop_per_s(), 1),
        duration(r.ns_per_iter),
        ulp,
        rel,
        f(r.vs_scalar, 2),
        f(r.vs_plain, 1),
        f(r.vs("gemm"), 2),
        f(r.vs("matrixmultiply"), 2),
        roofline,
        f(r.roofline_ratio, 2),
        format!("{:.0}%", r.rel_iqr * 100.0),
    ])
}

/// A time with a readable unit.
pub fn duration(ns: f64) -> String {
    if !ns.is_finite() {
        "-".to_string()
    } else if ns < 1e3 {
        format!("{ns:.0}ns")
    } else if ns < 1e6 {
        format!("{:.1}us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2}ms", ns / 1e6)
    } else {
        format!("{:.2}s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_required_fields_and_escapes() {
        let r = Row {
            kernel: "soft\"max".into(),
            isa: "avx2".into(),
            dtype: "f32".into(),
            shape: "4x4".into(),
            bytes: Some(128.0),
            elements: Some(16.0),
            ns_per_iter: 64.0,
            max_ulp: Some(2),
            max_rel_err: Some(1.5e-7),
            roofline: Some("exp(avx2)".into()),
            roofline_ratio: Some(0.5),
            ..Row::default()
        };
        let j = r.json();
        for key in [
            "kernel",
            "isa",
            "dtype",
            "shape",
            "bytes",
            "ns_per_iter",
            "gb_per_s",
            "gflop_per_s",
            "max_ulp",
            "max_rel_err",
            "roofline",
            "roofline_ratio",
            "vs_scalar",
            "vs_plain",
            "gelem_per_s",
            "vs_gemm",
            "within_bound",
        ] {
            assert!(j.contains(&format!("\"{key}\":")), "{key} missing in {j}");
        }
        assert!(j.starts_with("{\"kernel\":\"soft\\\"max\","), "{j}");
        assert!(j.contains("\"gb_per_s\":2,"), "{j}");
        assert!(j.contains("\"gflop_per_s\":null"), "{j}");
        assert!(j.contains("\"max_rel_err\":1.5e-7"), "{j}");
        assert!(j.contains("\"within_bound\":null"), "{j}");
        assert!(j.ends_with('}'));
    }
}
