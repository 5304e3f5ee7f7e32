//! Random draws for the simulator: lognormal service times (Box-Muller over a seeded
//! [`fastrand::Rng`]), empirical service times (a histogram of latencies and weights, as a
//! graph file gives them), exponential inter-arrival gaps, and seed derivation.
//!
//! Every random number in a run comes from an `Rng` seeded from the run's seed, so the same
//! seed gives the same run.
//!
//! Why by hand and not `rand_distr`: no crate the simulator keeps draws these. Its one
//! generator is `fastrand`, and `rand_distr` draws only from `rand`'s generators, so using it
//! would add `rand` and its support crates to the tree and change every seeded draw (every
//! published number) for three draws of a few lines each: the normal (Box-Muller), the
//! exponential (inversion) and the histogram's, each tested below against what it must give.

use std::sync::Arc;
use std::time::Duration;

/// The z-score of the 99th percentile of a standard normal distribution.
const Z99: f64 = 2.326_347_874_040_841;

/// A lognormal distribution of durations: `exp(mu + sigma * z)` milliseconds, `z` standard
/// normal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogNormal {
    mu: f64,
    sigma: f64,
}

impl LogNormal {
    /// The distribution with this median and 99th percentile.
    ///
    /// A `p99` at or below the median gives a constant (`sigma` zero).
    pub fn from_median_p99(median: Duration, p99: Duration) -> Self {
        let median = median.as_secs_f64() * 1e3;
        let p99 = p99.as_secs_f64() * 1e3;
        let sigma = if p99 > median {
            (p99 / median).ln() / Z99
        } else {
            0.0
        };
        LogNormal {
            mu: median.ln(),
            sigma,
        }
    }

    /// The median.
    pub fn median(&self) -> Duration {
        Duration::from_secs_f64(self.mu.exp() / 1e3)
    }

    /// The mean, `exp(mu + sigma² / 2)`.
    pub fn mean(&self) -> Duration {
        Duration::from_secs_f64((self.mu + self.sigma * self.sigma / 2.0).exp() / 1e3)
    }

    /// The `q` quantile (0 < q < 1).
    pub fn quantile(&self, q: f64) -> Duration {
        Duration::from_secs_f64((self.mu + self.sigma * probit(q)).exp() / 1e3)
    }

    /// One draw.
    pub fn sample(&self, rng: &mut fastrand::Rng) -> Duration {
        let ms = (self.mu + self.sigma * standard_normal(rng)).exp();
        Duration::from_secs_f64(ms.min(3.6e6) / 1e3)
    }
}

/// An empirical distribution of durations: each latency drawn with a probability in proportion
/// to its weight (a histogram read from a graph file, or from traces).
#[derive(Debug, Clone, PartialEq)]
pub struct Empirical {
    /// `(latency, cumulative weight)`, in the order given.
    points: Vec<(Duration, f64)>,
}

impl Empirical {
    /// The distribution of `(latency, weight)` pairs; `None` when there is none, or a weight is
    /// negative or not finite, or they sum to zero.
    pub fn new(pairs: &[(Duration, f64)]) -> Option<Empirical> {
        let mut total = 0.0;
        let mut points = Vec::with_capacity(pairs.len());
        for &(latency, weight) in pairs {
            if !(weight.is_finite() && weight >= 0.0) {
                return None;
            }
            total += weight;
            points.push((latency, total));
        }
        (total > 0.0 && total.is_finite()).then_some(Empirical { points })
    }

    fn total(&self) -> f64 {
        self.points.last().map_or(0.0, |&(_, total)| total)
    }

    /// The mean, the weighted sum of the latencies.
    pub fn mean(&self) -> Duration {
        let mut before = 0.0;
        let mut sum = 0.0;
        for &(latency, cumulative) in &self.points {
            sum += latency.as_secs_f64() * (cumulative - before);
            before = cumulative;
        }
        Duration::from_secs_f64(sum / self.total())
    }

    /// One draw (one uniform number from `rng`).
    ///
    /// A latency that is not a whole number of milliseconds (an importer's bucket mean,
    /// `4.213ms`) is drawn as the millisecond below it or the one above, in proportion (4 ms
    /// 78.7 % of the time, 5 ms 21.3 %), so that its mean holds on the simulator's clock, which
    /// ticks in whole milliseconds and would otherwise round every such draw up. The choice
    /// reuses where the uniform number fell within the latency's weight: a histogram of whole
    /// milliseconds draws exactly as it did without it.
    pub fn sample(&self, rng: &mut fastrand::Rng) -> Duration {
        let at = rng.f64() * self.total();
        let index = self
            .points
            .partition_point(|&(_, cumulative)| cumulative <= at);
        let last = self.points.len().saturating_sub(1);
        let index = index.min(last);
        let Some(&(latency, cumulative)) = self.points.get(index) else {
            return Duration::ZERO;
        };
        const MS: u128 = 1_000_000;
        let nanos = latency.as_nanos();
        let below = nanos % MS;
        if below == 0 {
            return latency;
        }
        let before = index.checked_sub(1).map_or(0.0, |i| self.points[i].1);
        let within = ((at - before) / (cumulative - before)).clamp(0.0, 1.0);
        let floor = Duration::from_nanos(u64::try_from(nanos - below).unwrap_or(u64::MAX));
        if within < below as f64 / MS as f64 {
            floor + Duration::from_millis(1)
        } else {
            floor
        }
    }
}

/// A service time: lognormal (every built-in scenario) or empirical (a graph file's histogram).
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceTime {
    /// Lognormal.
    LogNormal(LogNormal),
    /// Drawn from a histogram.
    Empirical(Arc<Empirical>),
}

impl ServiceTime {
    /// The mean.
    pub fn mean(&self) -> Duration {
        match self {
            ServiceTime::LogNormal(d) => d.mean(),
            ServiceTime::Empirical(d) => d.mean(),
        }
    }

    /// One draw.
    pub fn sample(&self, rng: &mut fastrand::Rng) -> Duration {
        match self {
            ServiceTime::LogNormal(d) => d.sample(rng),
            ServiceTime::Empirical(d) => d.sample(rng),
        }
    }
}

impl From<LogNormal> for ServiceTime {
    fn from(d: LogNormal) -> Self {
        ServiceTime::LogNormal(d)
    }
}

impl From<Empirical> for ServiceTime {
    fn from(d: Empirical) -> Self {
        ServiceTime::Empirical(Arc::new(d))
    }
}

/// One standard normal draw by the Box-Muller transform (the cosine half; the sine half is
/// discarded to keep the draw stateless).
pub fn standard_normal(rng: &mut fastrand::Rng) -> f64 {
    // 1 - f64() lies in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - rng.f64();
    let u2 = rng.f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// An exponential draw with this mean: the gap between two Poisson arrivals.
pub fn exponential(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -(1.0 - rng.f64()).ln() * mean
}

/// The inverse of the standard normal CDF (Acklam's rational approximation, relative error
/// below 1.2e-9): enough to describe a distribution in the report.
pub fn probit(q: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let q = q.clamp(1e-300, 1.0 - 1e-16);
    let tail = |p: f64| {
        let r = (-2.0 * p.ln()).sqrt();
        (((((C[0] * r + C[1]) * r + C[2]) * r + C[3]) * r + C[4]) * r + C[5])
            / ((((D[0] * r + D[1]) * r + D[2]) * r + D[3]) * r + 1.0)
    };
    if q < 0.024_25 {
        tail(q)
    } else if q > 1.0 - 0.024_25 {
        -tail(1.0 - q)
    } else {
        let p = q - 0.5;
        let r = p * p;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * p
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// A seed for one component of a run, derived from the run's seed and a label (splitmix64
/// over the label's bytes), so that adding a component never shifts another's numbers.
pub fn derive_seed(seed: u64, label: &str) -> u64 {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    for byte in label.bytes() {
        x = splitmix(x ^ u64::from(byte));
    }
    splitmix(x)
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lognormal_hits_its_median_and_p99() {
        let d = LogNormal::from_median_p99(Duration::from_millis(1), Duration::from_millis(10));
        let mut rng = fastrand::Rng::with_seed(7);
        let mut draws: Vec<Duration> = (0..200_000).map(|_| d.sample(&mut rng)).collect();
        draws.sort();
        let at = |q: f64| draws[(q * draws.len() as f64) as usize].as_secs_f64() * 1e3;
        assert!((at(0.5) - 1.0).abs() < 0.02, "median {}", at(0.5));
        assert!((at(0.99) - 10.0).abs() < 0.4, "p99 {}", at(0.99));
        assert!((d.quantile(0.99).as_secs_f64() * 1e3 - 10.0).abs() < 1e-6);
    }

    #[test]
    fn an_empirical_histogram_draws_each_latency_by_its_weight() {
        let ms = Duration::from_millis;
        let d = Empirical::new(&[(ms(1), 3.0), (ms(10), 1.0), (ms(50), 0.0)]).expect("valid");
        let mean = d.mean().as_secs_f64();
        assert!((mean - 0.013 / 4.0).abs() < 1e-9, "mean {mean}");
        let mut rng = fastrand::Rng::with_seed(7);
        let draws: Vec<Duration> = (0..40_000).map(|_| d.sample(&mut rng)).collect();
        let slow = draws.iter().filter(|&&x| x == ms(10)).count() as f64 / 40_000.0;
        assert!((slow - 0.25).abs() < 0.01, "share of 10 ms draws {slow}");
        assert!(!draws.contains(&ms(50)), "a zero weight is never drawn");
        assert!(Empirical::new(&[]).is_none());
        assert!(Empirical::new(&[(ms(1), -1.0)]).is_none());
        assert!(Empirical::new(&[(ms(1), 0.0)]).is_none());
    }

    #[test]
    fn a_fraction_of_a_millisecond_is_drawn_as_the_neighbouring_milliseconds_keeping_the_mean() {
        let ms = Duration::from_millis;
        let d =
            Empirical::new(&[(Duration::from_micros(4_250), 1.0), (ms(9), 1.0)]).expect("valid");
        let mut rng = fastrand::Rng::with_seed(7);
        let draws: Vec<Duration> = (0..40_000).map(|_| d.sample(&mut rng)).collect();
        let share = |x| draws.iter().filter(|&&y| y == x).count() as f64 / 40_000.0;
        assert!((share(ms(4)) - 0.375).abs() < 0.01, "4 ms {}", share(ms(4)));
        assert!((share(ms(5)) - 0.125).abs() < 0.01, "5 ms {}", share(ms(5)));
        assert!(
            (share(ms(9)) - 0.5).abs() < 0.01,
            "whole ms drawn as they are"
        );
        assert_eq!(share(ms(4)) + share(ms(5)) + share(ms(9)), 1.0);
    }

    #[test]
    fn exponential_gaps_have_their_mean_and_are_never_negative() {
        let mut rng = fastrand::Rng::with_seed(7);
        let gaps: Vec<f64> = (0..100_000).map(|_| exponential(&mut rng, 0.01)).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!((mean - 0.01).abs() < 0.0002, "mean {mean}");
        assert!(gaps.iter().all(|g| g.is_finite() && *g >= 0.0));
        // The share below the mean: 1 - 1/e for an exponential.
        let below = gaps.iter().filter(|g| **g < 0.01).count() as f64 / gaps.len() as f64;
        assert!((below - (1.0 - (-1.0f64).exp())).abs() < 0.01, "{below}");
    }

    #[test]
    fn probit_inverts_known_points() {
        assert!(probit(0.5).abs() < 1e-9);
        assert!((probit(0.99) - Z99).abs() < 1e-8);
        assert!((probit(0.01) + Z99).abs() < 1e-8);
    }

    #[test]
    fn derived_seeds_differ_by_label_and_repeat() {
        assert_eq!(derive_seed(1, "leaf"), derive_seed(1, "leaf"));
        assert_ne!(derive_seed(1, "leaf"), derive_seed(1, "mid"));
        assert_ne!(derive_seed(1, "leaf"), derive_seed(2, "leaf"));
    }
}
