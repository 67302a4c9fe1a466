//! Generated traces match their profiles' published statistics within stated tolerances.

use permafrost_trace::{
    generate, GenOptions, Op, Profile, Record, SizeClass, TraceStats, TraceStatsBuilder,
};

fn stats_of(profile: Profile, requests: u64, seed: u64) -> TraceStats {
    let mut builder = TraceStatsBuilder::new();
    let mut last_ms = 0;
    for record in generate(
        profile,
        &GenOptions {
            requests,
            seed,
            duration_ms: None,
        },
    ) {
        assert!(record.time_ms >= last_ms, "records come out in time order");
        last_ms = record.time_ms;
        builder.add(&record);
    }
    builder.finish()
}

fn within(name: &str, actual: f64, target: f64, tolerance: f64) {
    assert!(
        (actual - target).abs() <= tolerance,
        "{name}: {actual:.4} is not within ±{tolerance} of {target}"
    );
}

fn within_relative(name: &str, actual: f64, target: f64, relative: f64) {
    assert!(
        (actual - target).abs() <= relative * target,
        "{name}: {actual:.4} is not within ±{:.0} % of {target}",
        relative * 100.0
    );
}

/// The targets of the `ecfs` profile (thesis Tables 2.1, 2.3, 2.4, Fig. 2.5, §2.8) and the
/// tolerances the generator promises; the same list is in docs/trace.md.
fn check_ecfs(stats: &TraceStats) {
    print!("{}", stats.to_text());
    // Table 2.3 operation mix: ±0.5 percentage points.
    let total = 38.5 + 78.3 + 4.2 + 6.4;
    for (op, count) in [
        (Op::Get, 38.5),
        (Op::Put, 78.3),
        (Op::Del, 4.2),
        (Op::Rename, 6.4),
    ] {
        within(
            &format!("{op} share"),
            stats.op_shares[op.index()],
            count / total,
            0.005,
        );
    }
    // Table 2.1 class shares of objects: ±1 percentage point; mean size per class: ±10 %.
    let table_2_1 = [
        (36.0, 4.4e12),
        (9.1, 6.3e12),
        (29.5, 101e12),
        (30.0, 585e12),
        (29.7, 6.2e15),
        (3.1, 8e15),
    ];
    let files: f64 = table_2_1.iter().map(|(count, _)| count).sum();
    for (class, (count_millions, capacity_bytes)) in SizeClass::ALL.iter().zip(table_2_1) {
        let row = &stats.size_classes[class.index()];
        within(
            &format!("{class} object share"),
            row.object_share,
            count_millions / files,
            0.01,
        );
        within_relative(
            &format!("{class} mean size"),
            row.mean_size_bytes,
            capacity_bytes / (count_millions * 1e6),
            0.10,
        );
    }
    // Table 2.3 bytes per GET: 7.24 PB / 38.5 M = 188 MB (±10 %), above the 108 MB per stored file of
    // Table 2.1: reads lean to large files (the profile's `read_size_tilt`). Bytes per PUT are not
    // matched (151 MB in Table 2.3): new files follow Table 2.1's class shares and means, ~108 MB.
    let get = Op::Get.index();
    within_relative(
        "bytes per GET",
        stats.op_bytes[get] as f64 / stats.op_counts[get] as f64,
        7.24e15 / 38.5e6,
        0.10,
    );
    // Never read: 73.7 % (§2.8) ± 2 points. Skew: half of the GETs go to less than 5 % of files.
    within(
        "never-read fraction",
        stats.never_read_fraction,
        0.737,
        0.02,
    );
    assert!(
        stats.half_of_gets_object_fraction < 0.05,
        "half of GETs go to {} of objects",
        stats.half_of_gets_object_fraction
    );
    // Table 2.4: actions per session P50 7 (±1), mean 47.04 (±20 %); lifetime P50 154 s (±25 %),
    // mean 2,601.6 s (±25 %); gap P50 250 s (±20 %); sessions with GET 40.0 %, with PUT 83.9 %
    // (±3 points); in-session re-gets 11 % of GETs (±3 points).
    let s = &stats.sessions;
    within("actions P50", s.actions.p50, 7.0, 1.0);
    within_relative("actions mean", s.actions.mean, 47.04, 0.20);
    within_relative("lifetime P50", s.lifetime_s.p50, 154.0, 0.25);
    within_relative("lifetime mean", s.lifetime_s.mean, 2601.6, 0.25);
    within_relative("gap P50", s.gap_s.p50, 250.0, 0.20);
    within(
        "sessions with GET",
        s.with_get_fraction,
        1_083_067.0 / 2_709_343.0,
        0.03,
    );
    within(
        "sessions with PUT",
        s.with_put_fraction,
        2_274_645.0 / 2_709_343.0,
        0.03,
    );
    within("in-session re-gets", s.reget_fraction_of_gets, 0.11, 0.03);
}

#[test]
fn ecfs_trace_of_a_million_requests_matches_the_thesis_statistics() {
    let stats = stats_of(Profile::Ecfs, 1_000_000, 42);
    assert_eq!(stats.records, 1_000_000);
    check_ecfs(&stats);
}

#[test]
fn generation_is_deterministic_from_the_seed() {
    for profile in [
        Profile::Ecfs,
        Profile::Mars,
        Profile::Vlbi,
        Profile::Robotics,
    ] {
        let options = GenOptions {
            requests: 5_000,
            seed: 9,
            duration_ms: None,
        };
        let a: Vec<Record> = generate(profile, &options).collect();
        let b: Vec<Record> = generate(profile, &options).collect();
        assert_eq!(a, b, "{profile:?}");
        let c: Vec<Record> = generate(
            profile,
            &GenOptions {
                seed: 10,
                ..options
            },
        )
        .collect();
        assert_ne!(a, c, "{profile:?}: another seed gives another trace");
    }
}

#[test]
fn mars_is_read_dominant_with_large_files() {
    // Whole sessions are read-only or write-only, and a few long sessions weigh a lot: the
    // operation mix of a MARS trace is noisier than ECFS's, hence ±2 and ±5 points.
    let stats = stats_of(Profile::Mars, 1_000_000, 3);
    print!("{}", stats.to_text());
    within(
        "GET share",
        stats.op_shares[Op::Get.index()],
        1200.0 / 1315.0,
        0.02,
    );
    within("never read", stats.never_read_fraction, 7.9 / 9.7, 0.05);
    let median_class = &stats.size_classes[SizeClass::Huge.index()];
    assert!(
        median_class.object_share > 0.4,
        "most MARS files are 48 MiB – 1 GiB"
    );
}

#[test]
fn vlbi_scans_are_written_read_once_after_about_100_days_then_deleted() {
    let records: Vec<Record> = generate(
        Profile::Vlbi,
        &GenOptions {
            requests: 20_000,
            seed: 1,
            duration_ms: None,
        },
    )
    .collect();
    let mut written = std::collections::HashMap::new();
    let mut reads = std::collections::HashMap::new();
    for record in &records {
        match record.op {
            Op::Put => {
                assert!((20_000_000_000..=50_000_000_000).contains(&record.size_bytes));
                written.insert(record.object, record.time_ms);
            }
            Op::Get => {
                let age_days = (record.time_ms - written[&record.object]) as f64 / 86_400_000.0;
                assert!(
                    (98.0..=102.0).contains(&age_days),
                    "read after {age_days} days"
                );
                assert!(
                    reads.insert(record.object, record.time_ms).is_none(),
                    "read once"
                );
            }
            Op::Del => assert!(reads.contains_key(&record.object), "deleted after its read"),
            Op::Rename => panic!("no renames in vlbi"),
        }
    }
    assert!(!reads.is_empty());
}

#[test]
fn robotics_rereads_a_small_annotated_fraction_often() {
    let stats = stats_of(Profile::Robotics, 200_000, 5);
    print!("{}", stats.to_text());
    let read = stats.objects_with_get as f64 / stats.objects as f64;
    assert!(read < 0.15, "only annotated data sets are read: {read}");
    let gets_per_read_object =
        stats.op_counts[Op::Get.index()] as f64 / stats.objects_with_get as f64;
    assert!(
        gets_per_read_object > 3.0,
        "annotated files are reread often: {gets_per_read_object}"
    );
    assert!(
        stats.op_counts[Op::Del.index()] > 0,
        "unannotated data sets expire"
    );
}
