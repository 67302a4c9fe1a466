//! A bounded latency histogram: exact below 1024 ms, within 0.2 % above.

/// Values below this are counted exactly.
const EXACT_BELOW_MS: u64 = 1024;
/// Sub-buckets per power of two above [`EXACT_BELOW_MS`].
const SUB_BUCKETS: u64 = 512;

/// Latency histogram in milliseconds. Memory is fixed (a few hundred KiB at
/// most) whatever the number of samples.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
    samples: u64,
    sum_ms: u128,
    max_ms: u64,
}

fn bucket_of(ms: u64) -> usize {
    if ms < EXACT_BELOW_MS {
        return ms as usize;
    }
    let exp = 63 - u64::from(ms.leading_zeros()); // >= 10
    let sub = (ms >> (exp - 9)) & (SUB_BUCKETS - 1);
    (EXACT_BELOW_MS + (exp - 10) * SUB_BUCKETS + sub) as usize
}

/// Smallest value that falls into `bucket`.
fn bucket_floor_ms(bucket: usize) -> u64 {
    let b = bucket as u64;
    if b < EXACT_BELOW_MS {
        return b;
    }
    let exp = 10 + (b - EXACT_BELOW_MS) / SUB_BUCKETS;
    let sub = (b - EXACT_BELOW_MS) % SUB_BUCKETS;
    (SUB_BUCKETS + sub) << (exp - 9)
}

impl LatencyHistogram {
    /// Count one sample.
    pub fn record(&mut self, ms: u64) {
        let b = bucket_of(ms);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        self.samples += 1;
        self.sum_ms += u128::from(ms);
        self.max_ms = self.max_ms.max(ms);
    }

    /// Number of samples.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Mean in ms (0 without samples).
    pub fn mean_ms(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.sum_ms as f64 / self.samples as f64
        }
    }

    /// Largest sample.
    pub fn max_ms(&self) -> u64 {
        self.max_ms
    }

    /// The `q`-quantile (0 < q ≤ 1): the smallest recorded bucket value at or
    /// below which at least `q` of the samples lie (exact below 1024 ms,
    /// otherwise the bucket's lower bound, at most 0.2 % low).
    pub fn quantile_ms(&self, q: f64) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.samples as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_floor_ms(b).min(self.max_ms);
            }
        }
        self.max_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_exact_below_a_second_and_close_above() {
        let mut h = LatencyHistogram::default();
        for ms in 1..=100 {
            h.record(ms);
        }
        assert_eq!(h.quantile_ms(0.99), 99);
        assert_eq!(h.quantile_ms(1.0), 100);
        assert!((h.mean_ms() - 50.5).abs() < 1e-9);
        let mut big = LatencyHistogram::default();
        big.record(10_000);
        big.record(123_456_789);
        let p = big.quantile_ms(0.5);
        assert!(p <= 10_000 && p as f64 >= 10_000.0 * 0.998, "{p}");
        assert!(big.quantile_ms(1.0) as f64 >= 123_456_789.0 * 0.998);
    }

    #[test]
    fn bucket_floors_are_monotonic_and_contain_their_values() {
        for ms in [
            0,
            1,
            1023,
            1024,
            1025,
            2047,
            2048,
            10_000,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket_of(ms);
            assert!(bucket_floor_ms(b) <= ms);
            assert!(bucket_floor_ms(b + 1) > ms || b + 1 > bucket_of(u64::MAX));
        }
    }
}
