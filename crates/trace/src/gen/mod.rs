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
        Profile::Ecfs => Box::new(archive::ArchiveGenerator::new(archive::ArchiveParams::ecfs(), options)),
        Profile::Mars => Box::new(archive::ArchiveGenerator::new(archive::ArchiveParams::mars(), options)),
        Profile::Vlbi => Box::new(vlbi::VlbiGenerator::new(vlbi::VlbiParams::default(), options)),
        Profile::Robotics => Box::new(robotics::RoboticsGenerator::new(robotics::RoboticsParams::default(), options)),
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
        assert!(median > 0.0 && mean > median, "log-normal needs 0 < median < mean");
        LogNormal { mu: median.ln(), sigma: (2.0 * (mean / median).ln()).sqrt() }
    }

    pub(crate) fn sample(&self, rng: &mut ChaCha8Rng) -> f64 {
        (self.mu + self.sigma * standard_normal(rng)).exp()
    }
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
