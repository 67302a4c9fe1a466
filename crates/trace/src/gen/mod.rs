//! Synthetic workload generators, one per profile. Each is an iterator of records in
//! non-decreasing time, deterministic from its seed; see `docs/trace.md` for what each profile
//! models and where its numbers come from.

mod archive;
mod robotics;
mod vlbi;

use crate::record::Record;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A workload to imitate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// ECMWF's user archive ECFS (thesis ch. 2: Tables 2.1, 2.3, 2.4, Fig. 2.5).
    Ecfs,
    /// ECMWF's object database MARS (thesis §2.5; only aggregate statistics exist, the rest is
    /// derived, see docs/trace.md).
    Mars,
    /// e-VLBI recording (seeds/004): large scan files written at a fixed rate, read once about
    /// 100 days later, then deleted.
    Vlbi,
    /// Robotics sensor data sets (seeds/000 ch. 3): runs of channel files; a small annotated
    /// fraction is reread often, the rest expires.
    Robotics,
}

/// How much to generate.
#[derive(Clone, Debug)]
pub struct GenOptions {
    /// Number of records to produce.
    pub requests: u64,
    /// Seed of the random generator.
    pub seed: u64,
    /// Time span to spread the requests over, in ms; `None` = the profile's natural rate (for
    /// `ecfs`/`mars` the request density of the real traces; for `vlbi`/`robotics` the stream
    /// ends after `requests` records). With `vlbi`/`robotics` it also ends the stream early.
    pub duration_ms: Option<u64>,
}

/// The generator of one profile: an iterator of records in non-decreasing `time_ms`.
pub struct Generator {
    inner: Box<dyn Iterator<Item = Record> + Send>,
}

impl Iterator for Generator {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        self.inner.next()
    }
}

/// A generator for `profile` with `options`.
pub fn generate(profile: Profile, options: &GenOptions) -> Generator {
    let inner: Box<dyn Iterator<Item = Record> + Send> = match profile {
        Profile::Ecfs => Box::new(archive::ArchiveGenerator::new(
            archive::ArchiveParams::ecfs(),
            options,
        )),
        Profile::Mars => Box::new(archive::ArchiveGenerator::new(
            archive::ArchiveParams::mars(),
            options,
        )),
        Profile::Vlbi => Box::new(vlbi::VlbiGenerator::new(
            vlbi::VlbiParams::default(),
            options,
        )),
        Profile::Robotics => Box::new(robotics::RoboticsGenerator::new(
            robotics::RoboticsParams::default(),
            options,
        )),
    };
    Generator { inner }
}

pub(crate) const SECOND_MS: u64 = 1000;
pub(crate) const DAY_MS: u64 = 86_400 * SECOND_MS;
pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * KIB;
pub(crate) const GIB: u64 = 1024 * MIB;

/// A log-normal distribution given by its median and mean (mean > median).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogNormal {
    mu: f64,
    sigma: f64,
}

impl LogNormal {
    pub(crate) fn from_median_mean(median: f64, mean: f64) -> LogNormal {
        assert!(
            median > 0.0 && mean > median,
            "log-normal needs 0 < median < mean"
        );
        LogNormal {
            mu: median.ln(),
            sigma: (2.0 * (mean / median).ln()).sqrt(),
        }
    }

    /// The log-normal whose mixture with a point mass of `zero_share` at 0 has the given median
    /// and mean (the mass at 0 must be below one half).
    pub(crate) fn with_zero_share(median: f64, mean: f64, zero_share: f64) -> LogNormal {
        assert!(
            (0.0..0.5).contains(&zero_share),
            "the zeros must not reach the median"
        );
        let z = normal_quantile((0.5 - zero_share) / (1.0 - zero_share));
        // mu + sigma·z = ln(median) and mu + sigma²/2 = ln(mean / (1 - zero_share)).
        let difference = (mean / (1.0 - zero_share)).ln() - median.ln();
        let sigma = z + (z * z + 2.0 * difference).sqrt();
        LogNormal {
            mu: median.ln() - sigma * z,
            sigma,
        }
    }

    /// Probability of a value below `x`.
    pub(crate) fn cdf(&self, x: f64) -> f64 {
        normal_cdf((x.ln() - self.mu) / self.sigma)
    }

    pub(crate) fn sample(&self, rng: &mut ChaCha8Rng) -> f64 {
        (self.mu + self.sigma * standard_normal(rng)).exp()
    }
}

/// The standard normal distribution function (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7).
pub(crate) fn normal_cdf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs() / std::f64::consts::SQRT_2);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-(x * x) / 2.0).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

/// The inverse of [`normal_cdf`], by bisection.
pub(crate) fn normal_quantile(p: f64) -> f64 {
    let (mut low, mut high) = (-10.0, 10.0);
    for _ in 0..100 {
        let mid = (low + high) / 2.0;
        if normal_cdf(mid) < p {
            low = mid
        } else {
            high = mid
        }
    }
    (low + high) / 2.0
}

/// A standard normal variate (Box–Muller).
pub(crate) fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.gen::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Uniform on a log scale between `low` and `high`.
pub(crate) fn log_uniform(rng: &mut ChaCha8Rng, low: f64, high: f64) -> f64 {
    (low.ln() + rng.gen::<f64>() * (high.ln() - low.ln())).exp()
}
