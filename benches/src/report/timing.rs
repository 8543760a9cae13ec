//! Interleaved timing: every contender of a case is timed in turn, round after round, so that
//! a slow time window (these machines are shared: 2–3× swings) hits all of them alike.
//!
//! Each contender is calibrated once to a batch of iterations lasting about `sample_ns`; a
//! round times one batch of every contender, each after an untimed warm-up batch of the same
//! contender (none where one call outlasts a batch: the call is its own warm-up), in an order
//! shuffled from round to round; the figures are the median over rounds of each contender's
//! time per iteration, and a ratio between two contenders is the median over rounds of their
//! per-round ratio.
//!
//! The warm-up and the shuffle keep a contender from paying, round after round, for the state
//! one particular contender leaves. Beyond L2 that state lasts: on Zen 4 at 4096×1024 (16 MiB
//! in, 16 MiB out), after three calls of the scalar LayerNorm (30 ms each, ordinary stores),
//! the streaming copy's first call took 1.0–1.3 ms against 0.6 ms steady and LayerNorm's
//! 1.7–2.2 ms (AVX2, AVX-512) against 0.8, and both took five to seven calls to recover; after
//! three calls of the SSE2 copy (0.8 ms each, ordinary stores too) both recovered at once.
//! With the order rotating, AVX2's LayerNorm followed the scalar kernel in every round but
//! one, and its copy roofline followed the SSE2 copy: the report gave AVX2's LayerNorm
//! 0.31–0.41 of the copy beyond L2 and AVX-512's, which followed AVX2's, 0.38–0.59 (both
//! shapes, four runs over two days). In a scratch harness timing the report's contenders on
//! its buffers (5 ms batches, 15 rounds), at 4096×1024, AVX2 then AVX-512: in the report's
//! rotating order without warm-up 0.39–0.48 and 0.54–0.63 (four runs), and 0.67–0.75 and
//! 0.70–0.87 with AVX-512's kernel listed before AVX2's; rotating with a warm-up batch
//! 0.43–0.62 and 0.43–0.76 (four runs), with ten warm-up batches 0.64 and 0.65; shuffled
//! without warm-up 0.61–0.64 and 0.64–0.71; shuffled with a warm-up batch 0.69 and 0.68 in
//! both of two runs. The report, shuffled with a warm-up batch, in two runs: 0.59 and 0.70 on
//! AVX2, 0.59 and 0.69 on AVX-512. Each round then costs about twice as long. (`--quick`
//! batches last 1 ms and it has 7 rounds: its figures beyond L2 stay rough.)

use std::time::Instant;

use crate::data::Rng;

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
    let mut warm = vec![0u64; count];
    for c in 0..count {
        run(c); // warm the caches, the branch predictors and the page tables
        (batch[c], warm[c]) = calibrate(timing.sample_ns, || run(c));
    }
    let mut ns = vec![Vec::with_capacity(timing.rounds); count];
    let mut order: Vec<usize> = (0..count).collect();
    let mut rng = Rng::new(SHUFFLE_SEED);
    for _ in 0..timing.rounds.max(1) {
        shuffle(&mut rng, &mut order);
        for &c in &order {
            for _ in 0..warm[c] {
                run(c);
            }
            let start = Instant::now();
            for _ in 0..batch[c] {
                run(c);
            }
            ns[c].push(start.elapsed().as_nanos() as f64 / batch[c] as f64);
        }
    }
    Samples { ns }
}

/// Iterations of `run` that take about `target_ns` (at least one), and those of the warm-up
/// before each batch: as many, or none where one call outlasts `target_ns` (the call is then
/// its own warm-up).
fn calibrate(target_ns: f64, mut run: impl FnMut()) -> (u64, u64) {
    let mut iters = 1u64;
    loop {
        let start = Instant::now();
        for _ in 0..iters {
            run();
        }
        let ns = start.elapsed().as_nanos() as f64;
        if ns >= target_ns / 4.0 || iters >= 1 << 32 {
            let batch = ((iters as f64 * target_ns / ns.max(1.0)).round() as u64).max(1);
            let outlasts = ns / iters as f64 >= target_ns;
            return (batch, if outlasts { 0 } else { batch });
        }
        iters *= 4;
    }
}

/// The seed of the rounds' orders: the same orders on every run.
const SHUFFLE_SEED: u64 = 0x5eed_0007;

/// Shuffles `v` (Fisher–Yates) with `rng`: the order of a round.
fn shuffle(rng: &mut Rng, v: &mut [usize]) {
    for i in (1..v.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        v.swap(i, j);
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
        assert!(counts.iter().all(|&n| n > 6));
        assert_eq!(s.rounds(), 3);
    }

    #[test]
    fn a_call_that_outlasts_its_batch_runs_once_a_round_without_warm_up() {
        let mut calls = 0;
        let t = Timing {
            rounds: 3,
            sample_ns: 1e5,
        };
        interleaved(1, &t, |_| {
            calls += 1;
            std::thread::sleep(std::time::Duration::from_micros(200));
        });
        // One warming call, one calibrating call, then one timed call a round.
        assert_eq!(calls, 2 + 3);
    }

    #[test]
    fn warm_up_as_long_as_a_batch_unless_one_call_outlasts_it() {
        let (batch, warm) = calibrate(1e5, || {
            std::hint::black_box(0);
        });
        assert!(batch > 1 && warm == batch, "{batch} {warm}");
        let slow = || std::thread::sleep(std::time::Duration::from_micros(200));
        assert_eq!(calibrate(1e5, slow), (1, 0));
    }

    #[test]
    fn shuffled_orders_are_permutations_and_vary() {
        let mut rng = Rng::new(SHUFFLE_SEED);
        let mut v: Vec<usize> = (0..7).collect();
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..31 {
            shuffle(&mut rng, &mut v);
            let mut sorted = v.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..7).collect::<Vec<_>>());
            firsts.insert(v[0]);
        }
        assert!(firsts.len() >= 5, "{firsts:?}");
    }
}
