//! Extended attributes that say what the archive does with a file (read-only, from the catalog and the power
//! states: reading them never wakes a disk). Any other name is `ENODATA` (never `ENOSYS`, which would make the
//! kernel stop asking for extended attributes on the whole mount).

use permafrost_catalog::StoredForm;
use permafrost_format::{Algorithm, ChunkIndex};
use permafrost_store::{ContentRecord, Store};

pub const STATE: &str = "user.permafrost.state";
pub const BLAKE3: &str = "user.permafrost.blake3";
pub const DISK: &str = "user.permafrost.disk";
pub const ENCODING: &str = "user.permafrost.encoding";
pub const PERSISTED_AT: &str = "user.permafrost.persisted_at";

/// Every attribute of a stored file, in `listxattr` order.
pub const NAMES: [&str; 5] = [STATE, BLAKE3, DISK, ENCODING, PERSISTED_AT];

/// The value of `name` for a stored file's content; `None` for names that are not ours (or not set yet:
/// `persisted_at` before the content is persisted).
/// A part list (an object uploaded in parts) is as far along as its least advanced part; its BLAKE3 is that of
/// its list of parts (docs/formats.md), each part being checked against its own.
pub fn value(store: &Store, content: &ContentRecord, name: &str) -> Option<String> {
    let parts = store.parts(content).unwrap_or_default();
    match name {
        STATE => {
            let state = parts.iter().map(|p| p.state).chain([content.state]).min()?;
            Some(state.as_str().to_string())
        }
        BLAKE3 => Some(content.id.hash.iter().map(|b| format!("{b:02x}")).collect()),
        DISK => Some(disk(store, content)),
        ENCODING if parts.is_empty() => Some(encoding(content)),
        ENCODING => Some(format!(
            "parts {}: {}",
            parts.len(),
            parts.iter().map(encoding).collect::<Vec<_>>().join("; ")
        )),
        PERSISTED_AT => {
            let mut latest = None;
            for c in parts.iter().chain([content]) {
                let at = store.persisted_ms(&c.id).ok().flatten()?;
                latest = latest.max(Some(at));
            }
            latest.map(format_utc_ms)
        }
        _ => None,
    }
}

/// `grid-bucket 3 disk 12 off` (power state: off, spinning-up, idle, active), or what keeps it off the grid.
fn disk(store: &Store, content: &ContentRecord) -> String {
    let residence = store.residence(content);
    let cached = if residence.cached { ", cached" } else { "" };
    match (residence.grid_bucket, residence.disk) {
        (Some(b), Some((disk, state))) => {
            format!("grid-bucket {b} disk {disk} {}{cached}", state.name())
        }
        (Some(b), None) => format!("grid-bucket {b}{cached}"),
        (None, _) => "none (in the cache, not placed yet)".to_string(),
    }
}

/// `chunked zstd, 1048576 stored bytes for 4194304` / `raw` / `as-sent zstd`.
fn encoding(content: &ContentRecord) -> String {
    let form = match content.stored_form {
        StoredForm::Raw => "raw".to_string(),
        StoredForm::AsSent => format!("as-sent {}", content.id.encoding),
        StoredForm::Parts => "parts".to_string(),
        StoredForm::Chunked => {
            let mut algorithms: Vec<&str> = Vec::new();
            if let Ok((index, _)) = ChunkIndex::decode(&content.chunk_index) {
                for entry in index.entries() {
                    let name = match entry.algorithm {
                        Algorithm::None => "none",
                        Algorithm::Zstd => "zstd",
                        Algorithm::Lz4 => "lz4",
                    };
                    if !algorithms.contains(&name) {
                        algorithms.push(name);
                    }
                }
            }
            format!("chunked {}", algorithms.join("+"))
        }
    };
    format!(
        "{form}, {} stored bytes for {}",
        content.stored_bytes, content.logical_bytes
    )
}

/// `2026-11-25T13:27:55.123Z`.
fn format_utc_ms(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| format!("{t:.3}"))
        .unwrap_or_else(|_| format!("{ms} ms after the epoch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_printed_in_utc() {
        assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc_ms(1_795_613_275_123), "2026-11-25T13:27:55.123Z");
    }
}
