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
    /// row checks one; not for plain Rust, which is not held to it).
    pub within_bound: Option<bool>,
    /// The worst error of the checked outputs as a fraction of the kernel's documented bound
    /// (`reference::fraction`): ≤ 1 within it; for f16 and bf16 the one rounding to the type
    /// is free.
    pub bound_fraction: Option<f64>,
    /// Where the row's input is hard on purpose, what makes it so.
    pub input: Option<String>,
    /// Speedup over the scalar path of the same kernel.
    pub vs_scalar: Option<f64>,
    /// Speedup over the plain Rust version.
    pub vs_plain: Option<f64>,
    /// Speedup over the same kernel on each other measured ISA (median of per-round ratios).
    pub vs_isa: Vec<(String, f64)>,
    /// Speedup over other named baselines of the same run: `gemm` and `matrixmultiply` (the
    /// unfused attention, GAU and linear compositions), `add+ln` (a plain add loop, then this
    /// crate's `layer_norm`), `attention plain` (the same ISA's kernel without the row's
    /// options: causal, padding, P/S), `f32` (a half-typed row against the f32 kernel),
    /// `copy` (linear at M = 16: the copy of the packed weights' bytes), `f32 weights` (a
    /// linear row with bf16 weights against the same kernel with f32 weights).
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
    /// Where a call does a countable number of user-visible things (an encoder pass: its
    /// sentences), how many and their name.
    pub units: Option<(f64, String)>,
    /// Where a call is a sequence of steps (an encoder pass), the share of its time in each.
    pub steps: Vec<(String, f64)>,
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

    /// The speedup over the unfused composition of the same work: the first entry of
    /// [`Row::vs`] named `gemm` (attention, GAU) or `add+ln` (Add & LayerNorm).
    pub fn vs_unfused(&self) -> Option<f64> {
        UNFUSED.iter().find_map(|name| self.vs(name))
    }

    /// [`Row::units`] per second, with their name.
    pub fn units_per_s(&self) -> Option<(f64, &str)> {
        self.units
            .as_ref()
            .map(|(n, name)| (n / self.ns_per_iter * 1e9, name.as_str()))
    }

    /// Whether the row is a kernel of this crate (not plain Rust, nor a machine limit).
    pub fn is_kernel(&self) -> bool {
        self.isa != "plain" && self.kernel != "roofline"
    }

    /// The row as one JSON object on one line.
    pub fn json(&self) -> String {
        let mut o = JsonObject::default();
        o.str("kind", "row");
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
        o.num("bound_fraction", self.bound_fraction);
        o.opt_str("input", self.input.as_deref());
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
        if let Some((per_s, name)) = self.units_per_s() {
            o.num(&format!("{name}_per_s"), Some(per_s));
        }
        if !self.steps.is_empty() {
            o.map("step_shares", &self.steps);
        }
        o.finish()
    }
}

/// The names in [`Row::vs`] of unfused compositions, in order of preference: the gemm crate
/// around this crate's pieces (attention, GAU), a plain add loop then this crate's
/// `layer_norm` (Add & LayerNorm).
pub const UNFUSED: [&str; 2] = ["gemm", "add+ln"];

/// A JSON object written by hand: strings escaped, non-finite and absent numbers as `null`.
#[derive(Default)]
pub struct JsonObject {
    out: String,
}

impl JsonObject {
    /// A nested value written as JSON already (an object or an array).
    pub fn raw(&mut self, key: &str, json: &str) {
        self.key(key);
        self.out.push_str(json);
    }

    fn key(&mut self, key: &str) {
        self.out.push(if self.out.is_empty() { '{' } else { ',' });
        push_json_string(&mut self.out, key);
        self.out.push(':');
    }

    /// A string.
    pub fn str(&mut self, key: &str, v: &str) {
        self.key(key);
        push_json_string(&mut self.out, v);
    }

    /// A string or `null`.
    pub fn opt_str(&mut self, key: &str, v: Option<&str>) {
        match v {
            Some(v) => self.str(key, v),
            None => {
                self.key(key);
                self.out.push_str("null");
            }
        }
    }

    /// A boolean or `null`.
    pub fn opt_bool(&mut self, key: &str, v: Option<bool>) {
        self.key(key);
        self.out.push_str(match v {
            Some(true) => "true",
            Some(false) => "false",
            None => "null",
        });
    }

    /// A number, or `null` where absent or not finite.
    pub fn num(&mut self, key: &str, v: Option<f64>) {
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

    /// The object's text.
    pub fn finish(mut self) -> String {
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
const COLUMNS: [(&str, usize, bool); 15] = [
    ("kernel", 12, false),
    ("isa", 6, false),
    ("type", 4, false),
    ("shape", 31, false),
    ("GB/s", 6, true),
    ("Gelem/s", 7, true),
    ("GFLOP/s", 7, true),
    ("time", 8, true),
    ("err/bnd", 7, true),
    ("xscalar", 7, true),
    ("xplain", 6, true),
    ("xunfused", 8, true),
    ("roofline", 30, false),
    ("xroof", 5, true),
    ("iqr", 4, true),
];

/// Cells of a table, each padded to its column (the last one not).
pub fn cells(cells: &[String], columns: &[(&str, usize, bool)]) -> String {
    let mut s = String::new();
    for (cell, &(_, width, right)) in cells.iter().zip(columns) {
        // Width in characters, not bytes: ✓, ×, ÷ are one column each.
        let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
        if right {
            let _ = write!(s, "{pad}{cell}  ");
        } else {
            let _ = write!(s, "{cell}{pad}  ");
        }
    }
    s.trim_end().to_string()
}

/// The titles of `columns` and a rule under them.
pub fn header(columns: &[(&str, usize, bool)]) -> String {
    let titles: Vec<String> = columns.iter().map(|c| c.0.to_string()).collect();
    let head = cells(&titles, columns);
    let rule = "-".repeat(head.chars().count());
    format!("{head}\n{rule}")
}

/// The column titles of the rows' table and a rule under them.
pub fn table_header() -> String {
    header(&COLUMNS)
}

/// A fraction of the error bound as printed: `0` for exact, `<0.01`, two digits, `!` past 1.
pub fn fraction(f: Option<f64>) -> String {
    match f {
        None => "-".to_string(),
        Some(0.0) => "0".to_string(),
        Some(f) if f < 0.01 => "<0.01".to_string(),
        Some(f) if f <= 1.0 => format!("{f:.2}"),
        Some(f) if f.is_finite() && f < 1e4 => format!("{f:.2}!"),
        Some(f) if f.is_finite() => format!("{f:.0e}!"),
        Some(_) => "inf!".to_string(),
    }
}

/// The row as a line of the table.
pub fn table_line(r: &Row) -> String {
    let f = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let roofline = match (&r.roofline, &r.method) {
        (Some(name), _) => name.clone(),
        (None, Some(method)) => format!("[{method}]"),
        (None, None) => "-".to_string(),
    };
    // Plain Rust is not held to the kernel's bound: no "!" on its row.
    let mut err = fraction(r.bound_fraction);
    if !r.is_kernel() {
        err = err.trim_end_matches('!').to_string();
    }
    let shape = match &r.input {
        Some(_) => format!("{} hard", r.shape),
        None => r.shape.clone(),
    };
    cells(
        &[
            r.kernel.clone(),
            r.isa.clone(),
            r.dtype.clone(),
            shape,
            f(r.gb_per_s(), 1),
            f(r.gelem_per_s(), 3),
            f(r.gflop_per_s(), 1),
            duration(r.ns_per_iter),
            err,
            f(r.vs_scalar, 2),
            f(r.vs_plain, 1),
            f(r.vs_unfused(), 2),
            roofline,
            f(r.roofline_ratio, 2),
            format!("{:.0}%", r.rel_iqr * 100.0),
        ],
        &COLUMNS,
    )
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
            "bound_fraction",
            "input",
        ] {
            assert!(j.contains(&format!("\"{key}\":")), "{key} missing in {j}");
        }
        assert!(j.starts_with("{\"kind\":\"row\",\"kernel\":\"soft\\\"max\","), "{j}");
        assert!(j.contains("\"gb_per_s\":2,"), "{j}");
        assert!(j.contains("\"gflop_per_s\":null"), "{j}");
        assert!(j.contains("\"max_rel_err\":1.5e-7"), "{j}");
        assert!(j.contains("\"within_bound\":null"), "{j}");
        assert!(j.ends_with('}'));
    }
}
