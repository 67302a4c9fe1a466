//! The parallel walk: `jwalk` reads directories and `lstat`s their entries on a rayon pool; the
//! calling thread folds the results into a [`Tally`] in depth-first order.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jwalk::{Parallelism, WalkDirGeneric};

use crate::compress::ChunkSampler;
use crate::{SurveyError, SurveyOptions, Totals, ERROR_EXAMPLES_MAX, EXTENSIONS_MAX};

/// Power-of-two bins for a `u64`: bin 0 is the value 0, bin `k >= 1` is `[2^(k-1), 2^k)`.
pub(crate) const BINS: usize = 65;

/// The bin of `value`: 0 for 0, otherwise the number of significant bits.
pub(crate) fn bin_of(value: u64) -> usize {
    (u64::BITS - value.leading_zeros()) as usize
}

/// Inclusive lower and exclusive upper bound of bin `bin` (the last bin's upper bound saturates).
pub(crate) fn bin_bounds(bin: usize) -> (u64, u64) {
    assert!(bin < BINS, "bin {bin} out of range");
    match bin {
        0 => (0, 1),
        64 => (1 << 63, u64::MAX),
        k => (1 << (k - 1), 1 << k),
    }
}

/// Per size bin: the raw sums.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SizeBinTally {
    pub files: u64,
    pub bytes: u64,
    pub allocated_bytes: u64,
    /// Bytes an HDD moves to read each file of the bin as one request (whole sectors).
    pub transferred_bytes: u64,
}

/// Files-per-directory counters, filled from the walker threads.
#[derive(Debug)]
pub(crate) struct DirectoryTally {
    pub directories_read: u64,
    pub empty_directories: u64,
    pub single_file_directories: u64,
    pub max_files: u64,
    pub bins: [u64; BINS],
}

impl Default for DirectoryTally {
    fn default() -> Self {
        DirectoryTally {
            directories_read: 0,
            empty_directories: 0,
            single_file_directories: 0,
            max_files: 0,
            bins: [0; BINS],
        }
    }
}

/// Files below the packing threshold.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SmallTally {
    pub files: u64,
    pub bytes: u64,
    pub allocated_bytes: u64,
    pub rounding_waste_bytes: u64,
    /// Non-empty small files and the sector-rounded bytes an HDD moves to read them one by one.
    pub requests: u64,
    pub transferred_bytes: u64,
}

/// Everything the walk counted.
#[derive(Debug)]
pub(crate) struct Tally {
    pub totals: Totals,
    pub size_bins: [SizeBinTally; BINS],
    pub directories: DirectoryTally,
    /// Extension → (files, bytes); at most [`EXTENSIONS_MAX`] keys plus `(other)`.
    pub extensions: HashMap<String, (u64, u64)>,
    pub small: SmallTally,
    pub rounding_waste_bytes: u64,
    pub unallocated_bytes: u64,
    pub block_rounding_model_bytes: u64,
    pub directory_bytes: u64,
    pub sampler: ChunkSampler,
}

/// Per-entry state computed on the walker threads: the entry's `lstat`.
type EntryState = Option<std::io::Result<Metadata>>;

/// Per-directory state passed down by jwalk: the root's device, for `--one-file-system`.
#[derive(Clone, Debug, Default)]
struct DirState {
    root_device: Option<u64>,
}

/// Walks `root` and tallies every entry.
pub(crate) fn walk(
    root: &Path,
    options: &SurveyOptions,
    block_bytes: u64,
    threads: usize,
) -> Result<Tally, SurveyError> {
    let root_device = std::fs::metadata(root)
        .map_err(|reason| SurveyError::Root {
            path: root.to_path_buf(),
            reason,
        })?
        .dev();
    let directories = Arc::new(Mutex::new(DirectoryTally::default()));
    let other_file_system = Arc::new(Mutex::new(0u64));
    let one_file_system = options.one_file_system;

    // A pool of our own: jwalk silently stops when a shared pool is too busy to answer.
    let parallelism = if threads <= 1 {
        Parallelism::Serial
    } else {
        Parallelism::RayonNewPool(threads)
    };
    let walker = {
        let directories = Arc::clone(&directories);
        let other_file_system = Arc::clone(&other_file_system);
        WalkDirGeneric::<(DirState, EntryState)>::new(root)
            .skip_hidden(false)
            .follow_links(false)
            .sort(false)
            .parallelism(parallelism)
            .root_read_dir_state(DirState {
                root_device: Some(root_device),
            })
            .process_read_dir(move |depth, _path, state, children| {
                let mut files = 0u64;
                let mut skipped = 0u64;
                for child in children.iter_mut().flatten() {
                    let metadata = child.metadata().map_err(std::io::Error::from);
                    if child.file_type.is_file() {
                        files += 1;
                    }
                    if let (true, Ok(metadata), Some(device)) =
                        (one_file_system, &metadata, state.root_device)
                    {
                        if metadata.is_dir() && metadata.dev() != device {
                            child.read_children_path = None;
                            skipped += 1;
                        }
                    }
                    child.client_state = Some(metadata);
                }
                if skipped > 0 {
                    *other_file_system.lock().expect("counter poisoned") += skipped;
                }
                if depth.is_none() {
                    // jwalk's pseudo-listing of the root's parent, holding only the root.
                    return;
                }
                let mut tally = directories.lock().expect("directory tally poisoned");
                tally.directories_read += 1;
                if children.is_empty() {
                    tally.empty_directories += 1;
                }
                if files == 1 {
                    tally.single_file_directories += 1;
                }
                tally.max_files = tally.max_files.max(files);
                tally.bins[bin_of(files)] += 1;
            })
    };

    let progress = walk_progress(options.show_progress);
    let slots = if options.sample_bytes_max == 0 {
        0
    } else {
        (options.sample_bytes_max / options.sample_chunk_bytes).max(1) as usize
    };
    let mut tally = Tally {
        totals: Totals::default(),
        size_bins: [SizeBinTally::default(); BINS],
        directories: DirectoryTally::default(),
        extensions: HashMap::new(),
        small: SmallTally::default(),
        rounding_waste_bytes: 0,
        unallocated_bytes: 0,
        block_rounding_model_bytes: 0,
        directory_bytes: 0,
        sampler: ChunkSampler::new(slots, options.sample_chunk_bytes.max(1), options.seed),
    };
    let mut seen_inodes: HashSet<(u64, u64)> = HashSet::new();
    let mut entries = 0u64;

    for entry in walker {
        entries += 1;
        if entries.is_multiple_of(4096) {
            progress.set_message(format!(
                "{} files, {}",
                tally.totals.files,
                crate::units::format_bytes(tally.totals.bytes)
            ));
        }
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(error) => {
                note_error(&mut tally.totals, error.to_string());
                continue;
            }
        };
        if let Some(error) = entry.read_children_error.take() {
            note_error(&mut tally.totals, error.to_string());
        }
        let metadata = match entry.client_state.take() {
            Some(result) => result,
            None => entry.metadata().map_err(std::io::Error::from),
        };
        let metadata = match metadata {
            Ok(metadata) => metadata,
            Err(error) => {
                note_error(
                    &mut tally.totals,
                    format!("{}: {error}", entry.path().display()),
                );
                continue;
            }
        };
        let file_type = metadata.file_type();
        if file_type.is_dir() {
            tally.totals.directories += 1;
            tally.directory_bytes += metadata.blocks() * 512;
        } else if file_type.is_symlink() {
            tally.totals.symlinks += 1;
        } else if file_type.is_file() {
            if metadata.nlink() > 1 && !seen_inodes.insert((metadata.dev(), metadata.ino())) {
                tally.totals.extra_hard_link_names += 1;
                continue;
            }
            let path = entry.path();
            add_file(&mut tally, options, block_bytes, &path, &metadata);
        } else {
            // Block and character devices, FIFOs, sockets.
            tally.totals.special_files += 1;
        }
    }
    progress.finish_and_clear();

    tally.directories = std::mem::take(&mut *directories.lock().expect("directory tally poisoned"));
    tally.totals.other_file_system_directories =
        *other_file_system.lock().expect("counter poisoned");
    Ok(tally)
}

fn add_file(
    tally: &mut Tally,
    options: &SurveyOptions,
    block_bytes: u64,
    path: &Path,
    metadata: &Metadata,
) {
    let size_bytes = metadata.len();
    let allocated_bytes = metadata.blocks() * 512;
    let transferred_bytes = if size_bytes == 0 {
        0
    } else {
        options.hdd.transferred_bytes(size_bytes)
    };
    let totals = &mut tally.totals;
    totals.files += 1;
    totals.bytes += size_bytes;
    totals.allocated_bytes += allocated_bytes;
    if size_bytes == 0 {
        totals.zero_length_files += 1;
    }

    let bin = &mut tally.size_bins[bin_of(size_bytes)];
    bin.files += 1;
    bin.bytes += size_bytes;
    bin.allocated_bytes += allocated_bytes;
    bin.transferred_bytes += transferred_bytes;

    let waste_bytes = allocated_bytes.saturating_sub(size_bytes);
    tally.rounding_waste_bytes += waste_bytes;
    tally.unallocated_bytes += size_bytes.saturating_sub(allocated_bytes);
    tally.block_rounding_model_bytes += size_bytes.div_ceil(block_bytes) * block_bytes - size_bytes;

    if size_bytes < options.pack_threshold_bytes {
        let small = &mut tally.small;
        small.files += 1;
        small.bytes += size_bytes;
        small.allocated_bytes += allocated_bytes;
        small.rounding_waste_bytes += waste_bytes;
        if size_bytes > 0 {
            small.requests += 1;
            small.transferred_bytes += transferred_bytes;
        }
    }

    let extension = extension_of(path.file_name().unwrap_or_default());
    let key = if tally.extensions.contains_key(extension.as_str())
        || tally.extensions.len() < EXTENSIONS_MAX
    {
        extension
    } else {
        "(other)".to_string()
    };
    let slot = tally.extensions.entry(key).or_default();
    slot.0 += 1;
    slot.1 += size_bytes;

    tally.sampler.offer(path, size_bytes);
}

/// The lower-case text after the last dot of a file name, or `(none)` when there is none, the
/// name starts with its only dot (`.bashrc`), or the text is not a plausible extension (longer
/// than 16 characters or not alphanumeric, `_`, `-`).
pub(crate) fn extension_of(file_name: &OsStr) -> String {
    let extension = Path::new(file_name).extension().and_then(OsStr::to_str);
    match extension {
        Some(text)
            if !text.is_empty()
                && text.len() <= 16
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
        {
            text.to_ascii_lowercase()
        }
        _ => "(none)".to_string(),
    }
}

fn note_error(totals: &mut Totals, message: String) {
    totals.errors += 1;
    if totals.error_examples.len() < ERROR_EXAMPLES_MAX {
        totals.error_examples.push(message);
    }
}

fn walk_progress(show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let progress = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    progress.set_style(
        ProgressStyle::with_template("{spinner} walking {msg} [{elapsed}]")
            .expect("static progress template is valid"),
    );
    progress.enable_steady_tick(Duration::from_millis(120));
    progress
}

/// The fundamental block size of the file system holding `path` (statvfs `f_frsize`).
pub(crate) fn file_system_block_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain C data; all-zero is a valid value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is a valid NUL-terminated string and `stat` a writable statvfs.
    let result = unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) };
    if result != 0 {
        return None;
    }
    let bytes = if stat.f_frsize > 0 {
        stat.f_frsize as u64
    } else {
        stat.f_bsize as u64
    };
    (bytes > 0).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_powers_of_two_with_zero_alone() {
        assert_eq!(bin_of(0), 0);
        assert_eq!(bin_of(1), 1);
        assert_eq!(bin_of(2), 2);
        assert_eq!(bin_of(3), 2);
        assert_eq!(bin_of(40), 6); // the 40-byte SHA1 files of Vcfs fall in [32, 64)
        assert_eq!(bin_bounds(6), (32, 64));
        assert_eq!(bin_of(u64::MAX), 64);
        assert_eq!(bin_bounds(0), (0, 1));
        for value in [1u64, 5, 4096, 65535, 65536, 1 << 40] {
            let (lower, upper) = bin_bounds(bin_of(value));
            assert!(
                lower <= value && value < upper,
                "{value} not in [{lower}, {upper})"
            );
        }
    }

    #[test]
    fn extensions_are_lower_case_and_plausible() {
        assert_eq!(extension_of(OsStr::new("a.JSON")), "json");
        assert_eq!(extension_of(OsStr::new("archive.tar.gz")), "gz");
        assert_eq!(extension_of(OsStr::new(".bashrc")), "(none)");
        assert_eq!(extension_of(OsStr::new("Makefile")), "(none)");
        assert_eq!(extension_of(OsStr::new("x.not an extension")), "(none)");
        assert_eq!(extension_of(OsStr::new("trailing.")), "(none)");
    }
}
