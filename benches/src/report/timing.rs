//! Interleaved timing: every contender of a case is timed in turn, round after round, so that
//! a slow time window (these machines are shared: 2–3× swings) hits all of them alike.
//!
//! Each contender is calibrated once to a batch of iterations lasting about `sample_ns`; a
//! round times one batch of every contender (the order rotating from round to round); the
//! figures are the median over rounds of each contender's time per iteration, and a ratio
//! between two contenders is the median over rounds of their per-round ratio.

use std::time::Instant;

/// How long to measure.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Rounds of one batch per contender.
    pub rounds: usize,
    /// Target duration of one batch, in nanoseconds.
    pub sample_ns: f64,
}

/// Times per iteration: `ns[contender][round]`.
#[derive(Debug, Clone)]
pub struct Samples {
    ns: Vec<Vec<f64>>,
}

/// Times `count` contenders, `run(c)` running contender `c` once, interleaved as the module
/// says.
pub fn interleaved(count: usize, timing: &Timing, mut run: impl FnMut(usize)) -> Samples {
    let mut batch = vec![1u64; count];
    for (c, batch) in batch.iter_mut().enumerate() {
        run(c); // warm the caches, the branch predictors and the page tables
        *batch = calibrate(timing.sample_ns, || run(c));
    }
    let mut ns = vec![Vec::with_capacity(timing.rounds); count];
    for round in 0..timing.rounds.max(1) {
        for k in 0..count {
            let c = (k + round) % count;
            let start = Instant::now();
            for _ in 0..batch[c] {
                run(c);
            }
            ns[c].push(start.elapsed().as_nanos() as f64 / batch[c] as f64);
        }
    }
    Samples { ns }
}

/// Iterations of `run` that take about `target_ns` (at least one).
fn calibrate(target_ns: f64, mut run: impl FnMut()) -> u64 {
    let mut iters = 1u64;
    loop {
        let start = Instant::now();
        for _ in 0..iters {
            run();
        }
        let ns = start.elapsed().as_nanos() as f64;
        if ns >= target_ns / 4.0 || iters >= 1 << 32 {
            return ((iters as f64 * target_ns / ns.max(1.0)).round() as u64).max(1);
        }
        iters *= 4;
    }
}

impl Samples {
    /// Median time per iteration of contender `c`, in nanoseconds.
    pub fn median(&self, c: usize) -> f64 {
        median(self.ns[c].clone())
    }

    /// Fastest time per iteration of contender `c` over the rounds, in nanoseconds: the
    /// estimate of a hardware limit (the FMA peak), which interference can only slow down.
    pub fn min(&self, c: usize) -> f64 {
        self.ns[c].iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// How much `a` is faster than `b`: the median over rounds of `time(b) / time(a)`.
    pub fn speedup(&self, a: usize, b: usize) -> f64 {
        median(self.ns[a].iter().zip(&self.ns[b]).map(|(a, b)| b / a).collect())
    }

    /// Interquartile range of contender `c`'s times, relative to their median: how noisy the
    /// measurement was.
    pub fn rel_iqr(&self, c: usize) -> f64 {
        let mut v = self.ns[c].clone();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        (q(0.75) - q(0.25)) / q(0.5)
    }

    /// Number of rounds measured.
    pub fn rounds(&self) -> usize {
        self.ns.first().map_or(0, Vec::len)
    }
}

/// The median of `v` (the mean of the two middle values for an even count); NaN if empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_ratios() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        let s = Samples {
            ns: vec![vec![1.0, 2.0, 1.0], vec![2.0, 4.0, 2.0]],
        };
        assert_eq!(s.speedup(0, 1), 2.0);
        assert_eq!(s.median(1), 2.0);
        assert_eq!(s.min(1), 2.0);
        assert_eq!(s.min(0), 1.0);
        assert_eq!(s.rounds(), 3);
    }

    #[test]
    fn interleaved_runs_every_contender() {
        let mut counts = [0u64; 3];
        let t = Timing {
            rounds: 3,
            sample_ns: 1e4,
        };
        let s = interleaved(3, &t, |c| counts[c] += 1);
        assert!(counts.iter().all(|&n| n > 3));
        assert_eq!(s.rounds(), 3);
    }
}
