//! `permafrost survey` on generated trees whose composition is known exactly.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use permafrost_survey::{survey, HddModel, Survey, SurveyError, SurveyOptions};
use rand::{RngCore, SeedableRng};

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

fn text_bytes(len: usize) -> Vec<u8> {
    let line = b"timestamp=1700000000 channel=heightmap status=ok value=42\n";
    line.iter().copied().cycle().take(len).collect()
}

/// root/
///   a.txt (100 B text)  b.TXT (0 B)  c.bin (5000 B random)  link -> a.txt  fifo
///   sub/  d.json (4096 B)  e (1 B)  hard (hard link to c.bin)
///   sub/deep/  f.dat (70000 B)  g.dat (2 MiB)
///   empty_dir/
fn known_tree(root: &Path) {
    fs::write(root.join("a.txt"), text_bytes(100)).unwrap();
    fs::write(root.join("b.TXT"), b"").unwrap();
    fs::write(root.join("c.bin"), random_bytes(5000, 1)).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
    let fifo = std::ffi::CString::new(root.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: `fifo` is a valid NUL-terminated path, alive for the call.
    let made = unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo failed");
    fs::create_dir_all(root.join("sub/deep")).unwrap();
    fs::create_dir(root.join("empty_dir")).unwrap();
    fs::write(root.join("sub/d.json"), text_bytes(4096)).unwrap();
    fs::write(root.join("sub/e"), b"x").unwrap();
    fs::hard_link(root.join("c.bin"), root.join("sub/hard")).unwrap();
    fs::write(root.join("sub/deep/f.dat"), random_bytes(70_000, 2)).unwrap();
    fs::write(root.join("sub/deep/g.dat"), random_bytes(2 << 20, 3)).unwrap();
}

fn quick_options() -> SurveyOptions {
    SurveyOptions {
        sample_bytes_max: 4 << 20,
        block_bytes: Some(4096),
        threads: 2,
        ..SurveyOptions::default()
    }
}

fn survey_known_tree(options: &SurveyOptions) -> (tempfile::TempDir, Survey) {
    let dir = tempfile::tempdir().unwrap();
    known_tree(dir.path());
    let result = survey(dir.path(), options).unwrap();
    (dir, result)
}

const SIZES: [u64; 7] = [100, 0, 5000, 4096, 1, 70_000, 2 << 20];

#[test]
fn counts_files_directories_links_and_special_files_exactly() {
    let (_dir, result) = survey_known_tree(&quick_options());
    let totals = &result.totals;
    assert_eq!(totals.files, 7, "the hard link is one file");
    assert_eq!(totals.bytes, SIZES.iter().sum::<u64>());
    assert_eq!(totals.zero_length_files, 1);
    assert_eq!(totals.directories, 4, "root, sub, sub/deep, empty_dir");
    assert_eq!(totals.symlinks, 1);
    assert_eq!(totals.special_files, 1);
    assert_eq!(totals.extra_hard_link_names, 1);
    assert_eq!(totals.errors, 0, "{:?}", totals.error_examples);
}

#[test]
fn size_histogram_puts_every_file_in_its_power_of_two_bin() {
    let (_dir, result) = survey_known_tree(&quick_options());
    let occupied: Vec<(u64, u64, u64, u64)> = result
        .size_histogram
        .iter()
        .filter(|bin| bin.files > 0)
        .map(|bin| (bin.lower_bytes, bin.upper_bytes, bin.files, bin.bytes))
        .collect();
    assert_eq!(
        occupied,
        vec![
            (0, 1, 1, 0),
            (1, 2, 1, 1),
            (64, 128, 1, 100),
            (4096, 8192, 2, 9096),
            (65536, 131072, 1, 70_000),
            (2 << 20, 4 << 20, 1, 2 << 20),
        ]
    );
    // The span runs from the first to the last occupied bin, with the empty ones in between.
    assert_eq!(result.size_histogram.first().unwrap().lower_bytes, 0);
    assert_eq!(result.size_histogram.len(), 23);
    let binned: u64 = result.size_histogram.iter().map(|bin| bin.files).sum();
    assert_eq!(binned, result.totals.files);
}

#[test]
fn extensions_are_tallied_case_insensitively_by_count_and_bytes() {
    let (_dir, result) = survey_known_tree(&quick_options());
    let rows: Vec<(&str, u64, u64)> = result
        .extensions
        .iter()
        .map(|row| (row.extension.as_str(), row.files, row.bytes))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("dat", 2, 70_000 + (2 << 20)),
            ("bin", 1, 5000),
            ("json", 1, 4096),
            ("txt", 2, 100),
            ("(none)", 1, 1),
        ]
    );
}

#[test]
fn files_per_directory_counts_file_names_per_directory() {
    let (_dir, result) = survey_known_tree(&quick_options());
    let directories = &result.files_per_directory;
    assert_eq!(directories.directories_read, 4);
    assert_eq!(directories.empty_directories, 1);
    assert_eq!(directories.single_file_directories, 0);
    // root: a.txt b.TXT c.bin; sub: d.json e hard; deep: f.dat g.dat; empty_dir: none.
    assert_eq!(directories.max_files, 3);
    let bins: Vec<(u64, u64, u64)> = directories
        .bins
        .iter()
        .map(|bin| (bin.lower, bin.upper, bin.directories))
        .collect();
    assert_eq!(bins, vec![(0, 1, 1), (1, 2, 0), (2, 4, 3)]);
}

#[test]
fn space_overhead_uses_measured_allocation_and_the_block_model() {
    let dir = tempfile::tempdir().unwrap();
    known_tree(dir.path());
    let result = survey(dir.path(), &quick_options()).unwrap();
    let mut allocated = 0u64;
    for name in [
        "a.txt",
        "b.TXT",
        "c.bin",
        "sub/d.json",
        "sub/e",
        "sub/deep/f.dat",
        "sub/deep/g.dat",
    ] {
        allocated += fs::metadata(dir.path().join(name)).unwrap().blocks() * 512;
    }
    let space = &result.space;
    assert_eq!(space.allocated_bytes, allocated);
    assert_eq!(result.totals.allocated_bytes, allocated);
    // ceil(size / 4096) * 4096 - size: 3996 + 0 + 3192 + 0 + 4095 + 3728 + 0.
    assert_eq!(space.block_rounding_model_bytes, 15_011);
    assert_eq!(space.inodes, 7 + 4 + 1 + 1);
    assert_eq!(space.inode_table_bytes, 13 * 256);
    assert_eq!(
        space.overhead_bytes,
        space.rounding_waste_bytes + space.directory_bytes + space.inode_table_bytes
    );
}

#[test]
fn packing_counts_small_files_and_extents() {
    let (_dir, result) = survey_known_tree(&quick_options());
    let packing = &result.packing;
    assert_eq!(packing.small_files, 6, "everything but the 2 MiB file");
    assert_eq!(packing.small_bytes, 100 + 5000 + 4096 + 1 + 70_000);
    assert_eq!(packing.extents, 1);
    assert_eq!(packing.inodes_saved, 5);
    assert_eq!(packing.metadata_reads_before, 6);
    assert_eq!(packing.metadata_reads_after, 1);
    assert!(packing.hdd_read_s_after < packing.hdd_read_s_before);

    // A tiny extent size needs one extent per started extent's worth of bytes.
    let options = SurveyOptions {
        pack_extent_bytes: 4096,
        ..quick_options()
    };
    let (_dir, result) = survey_known_tree(&options);
    assert_eq!(result.packing.extents, 79_197u64.div_ceil(4096));
}

#[test]
fn hdd_prediction_matches_hand_computed_time_for_the_tree() {
    let options = SurveyOptions {
        hdd: HddModel {
            seek_ms: 6.0,
            rpm: 7500.0,
            sequential_mib_s: 100.0,
            sector_bytes: 512,
        },
        ..quick_options()
    };
    let (_dir, result) = survey_known_tree(&options);
    // Six non-empty files, one 10 ms positioning each; sectors moved:
    // 100 -> 512, 5000 -> 5120, 4096, 1 -> 512, 70000 -> 70144, 2 MiB.
    let transferred = 512 + 5120 + 4096 + 512 + 70_144 + (2u64 << 20);
    let read_s = 6.0 * 0.010 + transferred as f64 / (100.0 * 1048576.0);
    assert_eq!(result.hdd.requests, 6);
    assert!(
        (result.hdd.read_s - read_s).abs() < 1e-12,
        "{} != {read_s}",
        result.hdd.read_s
    );
    let throughput = result.totals.bytes as f64 / read_s / 1048576.0;
    assert!((result.hdd.throughput_mib_s - throughput).abs() < 1e-9);
    // Packed: the 2 MiB file as before (10 ms + 20 ms), the small bytes as one extent.
    let packed_s =
        0.010 + (2u64 << 20) as f64 / (100.0 * 1048576.0) + 0.010 + 79_197.0 / (100.0 * 1048576.0);
    assert!((result.hdd.packed_read_s - packed_s).abs() < 1e-12);
    let time_shares: f64 = result
        .hdd
        .bins
        .iter()
        .map(|bin| bin.read_time_fraction)
        .sum();
    assert!((time_shares - 1.0).abs() < 1e-9);
}

fn tree_of(files: &[(&str, Vec<u8>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        fs::write(dir.path().join(name), bytes).unwrap();
    }
    dir
}

fn compression_of(dir: &Path, seed: u64) -> permafrost_survey::CompressionEstimate {
    let options = SurveyOptions {
        seed,
        ..quick_options()
    };
    survey(dir, &options).unwrap().compression.unwrap()
}

#[test]
fn compressible_data_is_estimated_to_save_much_and_random_data_nothing() {
    let text = tree_of(&[
        ("log.txt", text_bytes(3 << 20)),
        ("more.txt", text_bytes(200_000)),
    ]);
    let random = tree_of(&[
        ("noise.bin", random_bytes(3 << 20, 9)),
        ("more.bin", random_bytes(200_000, 10)),
    ]);
    let text_estimate = compression_of(text.path(), 1);
    let random_estimate = compression_of(random.path(), 1);
    assert!(text_estimate.saved_fraction > 0.9, "{text_estimate:?}");
    assert_eq!(
        random_estimate.saved_fraction, 0.0,
        "the 12.5 % rule keeps random chunks raw"
    );
    assert_eq!(random_estimate.chunks_left_raw_fraction, 1.0);
    assert!(
        text_estimate.sampled_bytes <= 4 << 20,
        "the sample budget bounds the bytes read"
    );
    assert_eq!(text_estimate.picks, 32, "4 MiB budget / 128 KiB chunks");
}

#[test]
fn mixed_tree_estimate_lands_between_and_is_reproducible() {
    let mixed = tree_of(&[
        ("log.txt", text_bytes(2 << 20)),
        ("noise.bin", random_bytes(2 << 20, 11)),
    ]);
    let estimate = compression_of(mixed.path(), 5);
    // Half the bytes save > 90 %, half save nothing: about 0.47, within the stated interval.
    let [low, high] = estimate.saved_fraction_ci95;
    assert!(low < estimate.saved_fraction && estimate.saved_fraction < high);
    assert!(low <= 0.47 && 0.47 <= high, "{estimate:?}");
    assert!(estimate.saved_fraction > 0.2 && estimate.saved_fraction < 0.75);
    let again = compression_of(mixed.path(), 5);
    assert_eq!(estimate.saved_fraction, again.saved_fraction);
}

#[test]
fn empty_tree_reports_zeros_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let result = survey(dir.path(), &quick_options()).unwrap();
    assert_eq!(result.totals.files, 0);
    assert_eq!(result.totals.directories, 1);
    assert!(result.size_histogram.is_empty());
    assert_eq!(result.compression.as_ref().unwrap().picks, 0);
    assert_eq!(result.hdd.read_s, 0.0);
    assert!(result.recommendations[0].contains("no regular files"));
}

#[test]
fn a_root_that_is_missing_or_not_a_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let error = survey(&missing, &quick_options()).unwrap_err();
    assert!(matches!(error, SurveyError::Root { .. }));
    assert!(error.to_string().contains("missing"), "{error}");
    let file = dir.path().join("file");
    fs::write(&file, b"x").unwrap();
    let error = survey(&file, &quick_options()).unwrap_err();
    assert!(matches!(error, SurveyError::NotADirectory(_)), "{error}");
}

#[test]
fn invalid_options_are_refused_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let options = SurveyOptions {
        zstd_level: 99,
        ..quick_options()
    };
    let error = survey(dir.path(), &options).unwrap_err();
    assert!(error.to_string().contains("zstd level 99"), "{error}");
}

#[test]
fn json_and_text_reports_carry_the_numbers() {
    let (_dir, result) = survey_known_tree(&quick_options());
    let json: serde_json::Value = serde_json::to_value(&result).unwrap();
    assert_eq!(json["totals"]["files"], 7);
    assert_eq!(json["packing"]["inodes_saved"], 5);
    assert!(json["hdd"]["throughput_mib_s"].as_f64().unwrap() > 0.0);
    let text = permafrost_survey::render_text(&result);
    assert!(text.contains("7 files"), "{text}");
    assert!(text.contains("Recommendations"));
    assert!(!result.recommendations.is_empty());
}

#[test]
fn serial_and_parallel_walks_agree() {
    let dir = tempfile::tempdir().unwrap();
    known_tree(dir.path());
    for i in 0..50 {
        let sub = dir.path().join(format!("many/{i}"));
        fs::create_dir_all(&sub).unwrap();
        for j in 0..i % 7 {
            fs::write(sub.join(format!("{j}.log")), text_bytes(i * 100 + j)).unwrap();
        }
    }
    let serial = survey(
        dir.path(),
        &SurveyOptions {
            threads: 1,
            ..quick_options()
        },
    )
    .unwrap();
    let parallel = survey(
        dir.path(),
        &SurveyOptions {
            threads: 4,
            ..quick_options()
        },
    )
    .unwrap();
    assert_eq!(serial.totals.files, parallel.totals.files);
    assert_eq!(serial.totals.bytes, parallel.totals.bytes);
    assert_eq!(serial.totals.directories, parallel.totals.directories);
    assert_eq!(
        serde_json::to_value(&serial.files_per_directory).unwrap(),
        serde_json::to_value(&parallel.files_per_directory).unwrap()
    );
}
