//! `cache_drop_behind`: an upload's cache file leaves the page cache once it is on the device, and reads of it,
//! persistence and reads from the grid still return every byte. Residency is measured with `mincore` on a
//! mapping of the file.

mod common;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use common::*;
use permafrost_store::*;

/// Pages of `path` in the page cache, and pages in all.
fn resident_pages(path: &Path) -> (usize, usize) {
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = len.div_ceil(page);
    // SAFETY: a read-only shared mapping of an open file, unmapped below; mincore writes `pages` bytes.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(map, libc::MAP_FAILED, "cannot map {}", path.display());
        let mut residency = vec![0u8; pages];
        assert_eq!(libc::mincore(map, len, residency.as_mut_ptr()), 0);
        libc::munmap(map, len);
        (residency.iter().filter(|&&b| b & 1 == 1).count(), pages)
    }
}

/// The one file of exactly `len` bytes under `dir` (the object's cache file: random bytes are stored raw).
fn file_of_len(dir: &Path, len: u64) -> PathBuf {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                todo.push(entry.path());
            } else if meta.len() == len {
                found.push(entry.path());
            }
        }
    }
    assert_eq!(
        found.len(),
        1,
        "files of {len} bytes under {}: {found:?}",
        dir.display()
    );
    found.pop().unwrap()
}

/// tmpfs keeps its pages whatever the advice: nothing to measure there.
fn on_tmpfs(dir: &Path) -> bool {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs is plain C data; all-zero is a valid value.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid NUL-terminated string and `fs` a live, writable statfs.
    assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut fs) }, 0);
    fs.f_type == libc::TMPFS_MAGIC
}

/// PUT 8 MiB with `cache_drop_behind` set as given; the share of its cache file still in the page cache.
fn resident_share_after_put(drop_behind: bool) -> Option<f64> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    if on_tmpfs(dir.path()) {
        eprintln!(
            "{} is on tmpfs: page residency cannot be tested there",
            dir.path().display()
        );
        return None;
    }
    let config = StoreConfig {
        fsync: true,
        cache_writeback_bytes: 1 << 20,
        cache_drop_behind: drop_behind,
        ..config()
    };
    let store = Store::open(dir.path(), config).unwrap();
    store
        .create_bucket("drop", BucketSettings::default())
        .unwrap();
    let body = data(7, 8 << 20, false);
    put(&store, "drop", "k", &body);
    let (resident, pages) = resident_pages(&file_of_len(dir.path(), body.len() as u64));
    assert!(
        get(&store, "drop", "k") == body,
        "the object read back differs"
    );
    // Persistence reads the cache file (from the device when its pages were dropped); the grid's copy is whole.
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    assert!(
        get(&store, "drop", "k") == body,
        "the persisted object read back differs"
    );
    Some(resident as f64 / pages as f64)
}

#[test]
fn with_drop_behind_an_uploads_cache_file_leaves_the_page_cache_and_reads_back_whole() {
    let (Some(kept), Some(dropped)) = (
        resident_share_after_put(false),
        resident_share_after_put(true),
    ) else {
        return;
    };
    assert!(
        kept > 0.9,
        "without drop-behind only {:.0} % of the file was cached",
        kept * 100.0
    );
    assert!(
        dropped < 0.05,
        "with drop-behind {:.0} % of the file stayed cached",
        dropped * 100.0
    );
}

#[test]
fn drop_behind_without_fsync_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = StoreConfig {
        fsync: false,
        cache_drop_behind: true,
        ..config()
    };
    let error = Store::open(dir.path(), config)
        .err()
        .expect("opened")
        .to_string();
    assert!(
        error.contains("cache_drop_behind") && error.contains("fsync"),
        "{error}"
    );
}
